//! The `tessera` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::draws::replay::ReplayRequest;

/// Tessera: weighted traffic allocation and tenant token quotas, on Postgres and Redis.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Default: ./tessera.toml when present. Environment
    /// variables (DATABASE_URL, REDIS_URL, TESSERA_REDIS_PREFIX, TESSERA_BIND, …) override it.
    #[arg(long, global = true, env = "TESSERA_CONFIG")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What to do; `serve` when none is given.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Migrate the database, then serve the HTTP API and the admin UI.
    Serve(ServeArgs),
    /// Create the database when missing and apply every migration.
    Migrate,
    /// Create the database when missing, migrate, and load demo data (idempotent); prints
    /// the passwords of the demo users it creates (one per role), once.
    DemoSeed,
    /// Manage users.
    #[command(subcommand)]
    User(UserCommand),
    /// The audit trail: `tessera audit verify` checks its hash chain and signatures.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Compare allocation strategies on the same weights: per-request random, weighted
    /// round robin, smooth weighted round robin, and ticket pools (shuffle, smooth).
    Verify(VerifyArgs),
    /// Measure the data plane against a baseline in the same run (uses the configured
    /// Redis under its own key prefix, removed afterwards).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Drive draws and quota traffic (reserve, then settle or release; a few left to
    /// expire) against the configured Redis through the client, so the dashboard is alive.
    Simulate(crate::simulate::SimulateArgs),
    /// Compare every tenant's use counters in Redis with the usage ledger in Postgres, print
    /// the differences, and (unless --dry-run) correct those beyond what is in flight; each
    /// tenant with a difference gets an audit row. The daily job does the same.
    Compensate(CompensateArgs),
    /// Replay the draws a pool served in a period (from the draw log) through a candidate
    /// configuration, and report per member the share, the cap hits and the success rate
    /// the recorded outcomes give it, with the window deviation and longest run, beside
    /// what actually happened.
    Replay(ReplayArgs),
    /// Redis housekeeping: `tessera redis libraries` lists the quota function libraries
    /// Redis holds (one per build that ever connected), `--prune` removes all but this
    /// build's.
    #[command(subcommand)]
    Redis(RedisCommand),
}

/// What `tessera redis` does.
#[derive(Debug, clap::Subcommand)]
pub enum RedisCommand {
    /// List the quota function libraries (`tessera_quota_<hash of the code>`) Redis holds,
    /// marking this build's; with --prune, remove every other one (on a cluster, from every
    /// primary). Safe while instances of an older build still run: each loads its own
    /// library again on its next call.
    Libraries(RedisLibrariesArgs),
}

/// Arguments of `tessera redis libraries`.
#[derive(Debug, Default, clap::Args)]
pub struct RedisLibrariesArgs {
    /// Remove every quota library but this build's.
    #[arg(long)]
    pub prune: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The pool.
    #[arg(long)]
    pub pool: String,
    /// The period's start (RFC 3339, e.g. 2026-12-01T10:00:00Z).
    #[arg(long)]
    pub from: String,
    /// The period's end (RFC 3339), after `from`.
    #[arg(long)]
    pub to: String,
    /// A candidate configuration: a JSON file with the pool's body as
    /// `PUT /api/v1/pools/{pool}` takes it. Default: the pool as published now.
    #[arg(long, conflicts_with = "weights")]
    pub candidate: Option<PathBuf>,
    /// The pool as published now with these weights instead, e.g. `A=45,B=30,C=25` (a tiers
    /// pool's tiers: `G=70,N=25,U=5`).
    #[arg(long)]
    pub weights: Option<String>,
    /// Seeds the replay's shuffles.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Tickets in a window of the window deviation.
    #[arg(long, default_value_t = 100)]
    pub window: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ReplayArgs {
    /// The request these arguments make, each refused naming its flag.
    pub fn request(&self) -> anyhow::Result<ReplayRequest> {
        use crate::draws::replay::Candidate;
        let pool = client::pool::PoolName::parse(&self.pool).map_err(|e| anyhow::anyhow!("--pool: {e}"))?;
        let time = |flag: &str, raw: &str| {
            chrono::DateTime::parse_from_rfc3339(raw)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| anyhow::anyhow!("{flag}: {raw:?} is not an RFC 3339 time ({e})"))
        };
        let (from, to) = (time("--from", &self.from)?, time("--to", &self.to)?);
        anyhow::ensure!(from < to, "--to: must be after --from");
        anyhow::ensure!(
            (1..=api::replay::MAX_WINDOW).contains(&self.window),
            "--window: must be 1..={}",
            api::replay::MAX_WINDOW
        );
        let candidate = match (&self.candidate, &self.weights) {
            (None, None) => Candidate::Published,
            (_, Some(spec)) => {
                Candidate::Weights(engine::Weights::parse_spec(spec).map_err(|e| anyhow::anyhow!("--weights: {e}"))?)
            }
            (Some(path), None) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--candidate: reading {}: {e}", path.display()))?;
                let body: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("--candidate: {} is not JSON: {e}", path.display()))?;
                Candidate::Body(Box::new(
                    crate::pools::parse_pool_body(&body).map_err(|e| anyhow::anyhow!("--candidate: {e}"))?,
                ))
            }
        };
        Ok(ReplayRequest { pool, from, to, candidate, seed: self.seed, window: self.window, bounds: None })
    }
}

/// Arguments of `tessera compensate`.
#[derive(Debug, Default, clap::Args)]
pub struct CompensateArgs {
    /// Report only; change nothing in Redis.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera serve`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Development only: serve every /api/v1 request as an admin without credentials.
    #[arg(long)]
    pub open: bool,
}

/// Arguments of `tessera user`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user. The password is read from stdin (one line) with --password-stdin,
    /// otherwise generated and printed once.
    Add(UserAddArgs),
    /// Set a user's password (read from stdin with --password-stdin, otherwise generated
    /// and printed once), end their sessions and any lock-out, and with --enable enable a
    /// disabled user again: how an admin who lost the password (or the demo users'
    /// passwords) gets back in. Audited (`user.password`, `user.enable`).
    ResetPassword(UserResetArgs),
}

/// Arguments of `tessera user reset-password`.
#[derive(Debug, clap::Args)]
pub struct UserResetArgs {
    /// The user's name.
    pub name: String,
    /// Read the new password (12..=256 characters) from stdin instead of generating one.
    #[arg(long)]
    pub password_stdin: bool,
    /// Enable the user again if they were disabled.
    #[arg(long)]
    pub enable: bool,
}

/// What `tessera audit` does.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the audit chain (hashes, links, gaps and, with TESSERA_AUDIT_KEY, every row's
    /// signature) from the newest signed checkpoint, or every row with --full; prints the
    /// first bad row and exits with status 1 when the chain is broken.
    Verify(AuditVerifyArgs),
    /// Sign the history written before TESSERA_AUDIT_KEY was set (the unsigned rows before
    /// the first signed one), once its hash chain is checked intact; prints the newest row
    /// signed and its hash, to be kept outside the database. Never signs a row written after
    /// a signed one. The head recorded outside the database before the key was set (as
    /// `tessera audit verify` printed it) is named with --through and --hash: the history
    /// must pass through it. The adoption is itself an audit row.
    Adopt(AuditAdoptArgs),
}

/// Arguments of `tessera audit adopt`.
#[derive(Debug, clap::Args)]
pub struct AuditAdoptArgs {
    /// The id of a row recorded outside the database before the key was set (the head that
    /// `tessera audit verify` printed then).
    #[arg(long)]
    pub through: i64,
    /// That row's hash (64 hex digits), as recorded.
    #[arg(long)]
    pub hash: String,
}

impl AuditAdoptArgs {
    /// The anchor, parsed: `--through` a row id, `--hash` 64 hex digits.
    pub fn anchor(&self) -> anyhow::Result<(i64, Vec<u8>)> {
        let bytes = crate::inputs::parse_hex(&self.hash)
            .filter(|bytes| bytes.len() == 32)
            .ok_or_else(|| anyhow::anyhow!("--hash: must be 64 hex digits (a row's hash as verify prints it)"))?;
        anyhow::ensure!(self.through >= 1, "--through: must be a row id (1 or more)");
        Ok((self.through, bytes))
    }
}

/// Arguments of `tessera audit verify`.
#[derive(Debug, clap::Args)]
pub struct AuditVerifyArgs {
    /// Check every row, not only those after the newest signed checkpoint.
    #[arg(long)]
    pub full: bool,
    /// Check an export (`GET /api/v1/audit.csv`) instead of the database, away from it:
    /// every row's hash from its content, each link, and each signature when
    /// TESSERA_AUDIT_KEY is set. Export the whole trail, or a period: a filter by entity,
    /// actor or action leaves gaps.
    #[arg(long, value_name = "FILE", conflicts_with = "full")]
    pub csv: Option<std::path::PathBuf>,
    /// With --csv: a row recorded elsewhere (`ID:HASH`, as verify prints the head), which the
    /// export must hold unchanged: catches rows cut from its end and a recomputed chain.
    #[arg(long, value_name = "ID:HASH", requires = "csv")]
    pub head: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl AuditVerifyArgs {
    /// `--head ID:HASH`, parsed: a row id and 64 hex digits.
    pub fn head(&self) -> anyhow::Result<Option<(i64, Vec<u8>)>> {
        let Some(head) = &self.head else { return Ok(None) };
        let rule = "--head: must be ID:HASH, a row id and its hash in 64 hex digits (as verify prints the head)";
        let (id, hash) = head.split_once(':').ok_or_else(|| anyhow::anyhow!(rule))?;
        let id: i64 = id.parse().map_err(|_| anyhow::anyhow!(rule))?;
        let hash = crate::inputs::parse_hex(hash).filter(|h| h.len() == 32).ok_or_else(|| anyhow::anyhow!(rule))?;
        Ok(Some((id, hash)))
    }
}

/// Arguments of `tessera user add`.
#[derive(Debug, clap::Args)]
pub struct UserAddArgs {
    /// The user's name: 1..=64 of ASCII letters, digits, '_', '.', '@', '-'.
    pub name: String,
    /// viewer, operator, pm, auditor or admin.
    #[arg(long)]
    pub role: String,
    /// Read the password (12..=256 characters) from stdin instead of generating one.
    #[arg(long)]
    pub password_stdin: bool,
}

/// What `tessera bench` measures.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Raw EVALSHA of a trivial script vs reserve+settle pairs, plus a 64-worker oversell run.
    Quota(BenchQuotaArgs),
    /// Raw LPOP vs a `client` draw vs the HTTP draw endpoint (an in-process server).
    Draw(BenchQuotaArgs),
    /// Admin weight change over HTTP → the pool's meta hash in Redis holds the new version
    /// (an in-process server on a database of its own, dropped afterwards).
    Publish(BenchPublishArgs),
    /// Redis loses every key of the deployment under load → every pool and tenant served
    /// again, and no configuration lost. Measured by removing every key of the bench's own
    /// prefix (SCAN + UNLINK), never a real FLUSHALL: the Redis may be shared. An in-process
    /// server with its scheduler, on a database of its own (dropped afterwards).
    Recover(BenchRecoverArgs),
    /// Server render time of the admin UI's pages (dashboard, pools, a pool, channels,
    /// tenants) with 20 pools, 200 channels and an hour of samples (an in-process server in
    /// open mode on loopback, on a database of its own, dropped afterwards).
    Ui(BenchUiArgs),
}

/// Arguments of `tessera bench ui`.
#[derive(Debug, clap::Args)]
pub struct BenchUiArgs {
    /// Pools in all, the demo seed's included.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(4..=1_000))]
    pub pools: u32,
    /// Channels in all, the demo seed's included.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub channels: u32,
    /// Tenants in all, the demo seed's included (the rest on the demo's plans).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub tenants: u32,
    /// Samples per pool, 10 s apart, ending now (360: the dashboard's hour).
    #[arg(long, default_value_t = 360, value_parser = clap::value_parser!(u32).range(1..=8_640))]
    pub samples: u32,
    /// Draws per pool between two samples.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub draws_per_sample: u32,
    /// Timed requests per page (after two warm-up requests).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub requests: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera bench recover`.
#[derive(Debug, clap::Args)]
pub struct BenchRecoverArgs {
    /// Pools to configure: the demo pools plus copies of them.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(2..=1_000))]
    pub pools: u32,
    /// Tenants to configure: the demo tenants plus copies of `acme`'s plan.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub tenants: u32,
    /// Workers drawing and reserving throughout.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Seconds of load before the wipe.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Seconds to wait for recovery before giving up (an error naming what never came back).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub timeout: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera bench publish`.
#[derive(Debug, clap::Args)]
pub struct BenchPublishArgs {
    /// How many weight changes to time.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub changes: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera bench quota` and `tessera bench draw`.
#[derive(Debug, clap::Args)]
pub struct BenchQuotaArgs {
    /// Requests in flight at once, for the baseline and the pairs alike.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Seconds each throughput phase runs.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `tessera verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Member weights, e.g. `A=5,B=3,C=2` or `A=0.45,B=30%,C=0.25`.
    #[arg(long, default_value = "A=5,B=3,C=2")]
    pub weights: String,
    /// How many draws each strategy makes.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub draws: u64,
    /// Window size for the per-window figures.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub window: u64,
    /// Seed of the random strategies (the same seed gives the same report).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl VerifyArgs {
    /// Runs the comparison and renders it (table or JSON).
    pub fn run(&self) -> anyhow::Result<String> {
        let weights = engine::Weights::parse_spec(&self.weights).map_err(|e| anyhow::anyhow!("--weights: {e}"))?;
        anyhow::ensure!(
            self.window <= self.draws,
            "--window: must not exceed --draws ({} > {})",
            self.window,
            self.draws
        );
        let report = engine::verify::verify(&weights, self.draws as usize, self.window as usize, self.seed);
        Ok(if self.json {
            serde_json::to_string_pretty(&report)? + "\n"
        } else {
            engine::verify::render_table(&report)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_arguments_are_refused_naming_the_flag() {
        let replay = |pool: &str, from: &str, to: &str, candidate: Option<&str>| ReplayArgs {
            pool: pool.to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
            candidate: candidate.map(PathBuf::from),
            weights: None,
            seed: 1,
            window: 100,
            json: false,
        };
        let (t1, t2) = ("2026-12-01T10:00:00Z", "2026-12-01T11:00:00+01:00");
        let err = |a: ReplayArgs| a.request().unwrap_err().to_string();
        assert!(err(replay("no spaces", t1, t2, None)).starts_with("--pool"));
        assert!(err(replay("p", "yesterday", t2, None)).starts_with("--from"));
        assert!(err(replay("p", t1, t2, None)).starts_with("--to"), "11:00+01:00 is 10:00Z");
        assert!(err(replay("p", t1, "2026-12-01T12:00:00Z", Some("/nonexistent/x.json"))).starts_with("--candidate"));
        let weighted =
            |spec: &str| ReplayArgs { weights: Some(spec.to_owned()), ..replay("p", t1, "2026-12-01T12:00:00Z", None) };
        assert!(err(weighted("A=5,A=3")).starts_with("--weights"));
        assert!(err(ReplayArgs { window: 0, ..replay("p", t1, "2026-12-01T12:00:00Z", None) }).starts_with("--window"));
        let ok = replay("p", t1, "2026-12-01T12:00:00Z", None).request().unwrap();
        assert_eq!((ok.to - ok.from).num_hours(), 2);
        assert!(matches!(ok.candidate, crate::draws::replay::Candidate::Published));
        assert_eq!(ok.bounds, None, "the command line reads and computes without bounds");
        let ok = weighted("A=5,B=3").request().unwrap();
        assert!(matches!(ok.candidate, crate::draws::replay::Candidate::Weights(ref w) if w.total() == 8));
    }

    fn args(weights: &str, draws: u64, window: u64, json: bool) -> VerifyArgs {
        VerifyArgs { weights: weights.to_owned(), draws, window, seed: 7, json }
    }

    #[test]
    fn verify_json_has_every_strategy_with_the_documented_keys() {
        let out = args("A=5,B=3,C=2", 20_000, 100, true).run().unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        for name in ["random", "wrr", "swrr", "pool_shuffle", "pool_smooth"] {
            let s = &v["strategies"][name];
            assert!(s["max_run"]["A"].is_u64(), "{name}: {s}");
            assert!(s["max_window_dev"].is_f64(), "{name}: {s}");
            assert!(s["long_run_error"]["C"].is_f64(), "{name}: {s}");
            assert!(s["switches"].is_u64(), "{name}: {s}");
        }
        let smooth = &v["strategies"]["pool_smooth"];
        assert!(smooth["max_window_dev"].as_f64().unwrap() <= 2.0, "{smooth}");
        assert!(smooth["max_run"]["A"].as_u64().unwrap() <= 3, "{smooth}");
    }

    #[test]
    fn verify_table_names_each_strategy() {
        let out = args("A=0.45,B=30%,C=0.25", 5_000, 50, false).run().unwrap();
        for name in ["random", "wrr", "swrr", "pool_shuffle", "pool_smooth"] {
            assert!(out.contains(name), "{out}");
        }
    }

    #[test]
    fn verify_refuses_bad_weights_naming_the_flag_and_the_member() {
        let err = args("A=5,B=-3", 1_000, 10, false).run().unwrap_err().to_string();
        assert!(err.starts_with("--weights:") && err.contains('B'), "{err}");
        let err = args("A=5", 10, 100, false).run().unwrap_err().to_string();
        assert!(err.starts_with("--window:"), "{err}");
    }

    #[test]
    fn the_command_line_parses_verify_flags() {
        let cli = Cli::try_parse_from([
            "tessera",
            "verify",
            "--weights",
            "X=1,Y=1",
            "--draws",
            "10",
            "--window",
            "5",
            "--json",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Verify(a)) => {
                assert_eq!((a.weights.as_str(), a.draws, a.window, a.json), ("X=1,Y=1", 10, 5, true))
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["tessera", "verify", "--draws", "0"]).is_err());
    }

    #[test]
    fn the_command_line_parses_bench_recover_flags() {
        let cli = Cli::try_parse_from(["tessera", "bench", "recover", "--pools", "4", "--json"]).unwrap();
        match cli.command {
            Some(Command::Bench(BenchCommand::Recover(a))) => {
                assert_eq!((a.pools, a.tenants, a.seconds, a.json), (4, 12, 2, true))
            }
            other => panic!("{other:?}"),
        }
        assert!(
            Cli::try_parse_from(["tessera", "bench", "recover", "--pools", "1"]).is_err(),
            "two demo pools at least"
        );
    }
}
