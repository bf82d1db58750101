//! The `tessera` binary: parse the command line, set up telemetry, run the subcommand.

use anyhow::Context;
use clap::Parser;
use server::cli::{AuditCommand, BenchCommand, Cli, Command, RedisCommand, UserCommand};
use server::configuration::Settings;
use server::startup::{Application, Signals};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Errors are for people: the message with its context chain, no backtrace.
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Prints a benchmark's report: one JSON object, or the table for people.
fn print_report<R: serde::Serialize>(json: bool, report: &R, render: fn(&R) -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        print!("{}", render(report));
    }
    Ok(())
}

/// `tessera audit verify --csv FILE`: an export checked without the database, its
/// signatures too when TESSERA_AUDIT_KEY is set.
fn verify_export(file: &std::path::Path, args: &server::cli::AuditVerifyArgs) -> anyhow::Result<()> {
    let head = args.head()?;
    if let Some(raw) = std::env::var("TESSERA_AUDIT_KEY").ok().filter(|k| !k.is_empty()) {
        server::audit::key::install(&server::configuration::AuditKey::parse(&raw)?)?;
    }
    let input = std::fs::File::open(file).with_context(|| format!("--csv: reading {}", file.display()))?;
    let report = server::audit::csv::verify_export(
        std::io::BufReader::new(input),
        server::audit::key::keyed(),
        head.as_ref().map(|(id, hash)| (*id, hash.as_slice())),
    )
    .with_context(|| format!("--csv {}", file.display()))?;
    print_report(args.json, &report, server::audit::csv::render)?;
    anyhow::ensure!(
        report.intact,
        "the export is not verified: {}",
        match (report.first_broken, report.problem) {
            (Some(id), problem) => format!("row {id} ({})", problem.unwrap_or("?")),
            (None, _) => "its rows are signed and TESSERA_AUDIT_KEY is not set".to_owned(),
        }
    );
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Verify(args)) = &cli.command {
        // Pure computation: needs no configuration, database or Redis.
        print!("{}", args.run()?);
        return Ok(());
    }
    if let Some(Command::Audit(AuditCommand::Verify(args))) = &cli.command {
        if let Some(file) = &args.csv {
            // Away from the database: no configuration, only the key when one is set.
            return verify_export(file, args);
        }
    }
    let settings = Settings::load(cli.config.as_deref())?;
    server::telemetry::init(settings.log_format, &settings.log_filter);
    let mut settings = settings;
    // Every audit row this process writes, whatever the command, is signed.
    if let Some(key) = &settings.audit_key {
        server::audit::key::install(key)?;
    }
    match cli.command.unwrap_or(Command::Serve(Default::default())) {
        Command::Verify(_) => unreachable!("handled above"),
        Command::Serve(args) => {
            settings.auth.open |= args.open;
            anyhow::ensure!(
                !settings.auth.open || settings.bind.ip().is_loopback(),
                "--open: open mode serves the API to anyone without credentials, so it is \
                 refused on {}; bind a loopback address (http.bind, TESSERA_BIND) to use it",
                settings.bind
            );
            if settings.auth.open {
                tracing::warn!(
                    "OPEN MODE: every /api/v1 request is served as an admin without credentials; development only"
                );
            }
            tracing::info!(config = %settings.redacted_summary(), "starting");
            server::store::create_database_if_missing(&settings).await?;
            let application = Application::build(&settings, Signals::Handle).await?;
            tracing::info!(port = application.port(), "serving http://{}", settings.bind);
            let state = application.state().clone();
            match server::publish::reconcile(&state).await {
                Ok(done) => tracing::info!(count = done.published.len(), "published what redis was missing"),
                Err(e) => tracing::warn!(error = format!("{e:#}"), "could not publish snapshots to redis yet"),
            }
            let state_for_journal = state.clone();
            let scheduler = server::jobs::Scheduler::start(state).await?;
            // The HTTP server stops on SIGINT/SIGTERM; the scheduler stops with it, then the
            // quota journal file is synced and let go.
            let stopped = application.run_until_stopped().await;
            scheduler.shutdown().await;
            state_for_journal.quotas.close_journal();
            tracing::info!("http server and scheduler stopped");
            stopped?;
        }
        Command::Bench(BenchCommand::Quota(args)) => {
            let report = server::bench::quota::run(&settings, &args).await?;
            print_report(args.json, &report, server::bench::quota::render)?;
        }
        Command::Bench(BenchCommand::Publish(args)) => {
            let report = server::bench::publish::run(&settings, &args).await?;
            print_report(args.json, &report, server::bench::publish::render)?;
        }
        Command::Bench(BenchCommand::Draw(args)) => {
            let report = server::bench::draw::run(&settings, &args).await?;
            print_report(args.json, &report, server::bench::draw::render)?;
        }
        Command::Bench(BenchCommand::Recover(args)) => {
            let report = server::bench::recover::run(&settings, &args).await?;
            print_report(args.json, &report, server::bench::recover::render)?;
        }
        Command::Bench(BenchCommand::Ui(args)) => {
            let report = server::bench::ui::run(&settings, &args).await?;
            print_report(args.json, &report, server::bench::ui::render)?;
        }
        Command::Simulate(args) => {
            server::store::create_database_if_missing(&settings).await?;
            let state = server::startup::build_state(&settings).await?;
            let stop = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let totals =
                server::simulate::run(&state, &args, stop, |t| println!("{}", server::simulate::render(t))).await?;
            println!("{}  (done)", server::simulate::render(&totals));
        }
        Command::Compensate(args) => {
            let state = server::startup::build_state(&settings).await?;
            let report = server::usage::compensate::compensate(&state, !args.dry_run).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("compared {} tenants; skipped {:?}", report.compared, report.skipped);
                for d in &report.drifts {
                    println!(
                        "{} {}: redis {} ledger {} (drift {:+}, in flight {}){}",
                        d.tenant,
                        d.bucket,
                        d.redis,
                        d.ledger,
                        d.tokens(),
                        d.in_flight,
                        if d.corrected { ", corrected" } else { "" }
                    );
                }
            }
        }
        Command::Redis(RedisCommand::Libraries(args)) => {
            let timeouts = client::RedisTimeouts::default();
            let redis = client::RedisHandle::on(settings.redis_target(timeouts)?, timeouts);
            let mut conn = redis.connection().await.context("connecting to redis")?;
            let removed = match args.prune {
                true => {
                    client::scripts::prune_quota_libraries(&mut conn).await.context("removing old quota libraries")?
                }
                false => Vec::new(),
            };
            let held = client::scripts::quota_libraries(&mut conn).await.context("listing the quota libraries")?;
            if args.json {
                let held: Vec<_> =
                    held.iter().map(|(name, current)| serde_json::json!({"name": name, "current": current})).collect();
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({"held": held, "removed": removed}))?);
            } else {
                for (name, current) in &held {
                    println!("{name}{}", if *current { "  (this build)" } else { "" });
                }
                for name in &removed {
                    println!("{name}  (removed)");
                }
                if held.is_empty() && removed.is_empty() {
                    println!("no quota library: this build's is loaded on the first connection of `tessera serve`");
                }
            }
        }
        Command::Replay(args) => {
            let request = args.request()?;
            let db = server::store::connect(&settings).await?;
            let report = server::draws::replay::replay(&db, &request).await?;
            print_report(args.json, &report, server::draws::replay::render)?;
        }
        Command::Audit(AuditCommand::Verify(args)) => {
            let db = server::store::connect(&settings).await?;
            let report = server::audit::store::verify_audit(&db, args.full).await?;
            print_report(args.json, &report, server::audit::store::render_report)?;
            anyhow::ensure!(
                report.intact,
                "{}",
                match (report.first_broken, report.problem.as_deref()) {
                    (Some(id), problem) =>
                        format!("the audit chain is broken at row {id} ({})", problem.unwrap_or("?")),
                    (None, _) =>
                        "the audit chain is not verified: the trail is signed and TESSERA_AUDIT_KEY is not set"
                            .to_owned(),
                }
            );
        }
        Command::Audit(AuditCommand::Adopt(args)) => {
            let anchor = args.anchor()?;
            let db = server::store::connect(&settings).await?;
            let adoption = server::audit::store::adopt_unsigned_history(&db, anchor).await?;
            match (adoption.through_id, &adoption.through_hash) {
                (Some(id), Some(hash)) => {
                    println!(
                        "signed {} rows, through row {id} (hash {hash}): keep these outside the database",
                        adoption.signed
                    )
                }
                _ => println!("nothing to sign: every row before the first signed one is signed"),
            }
        }
        Command::Migrate => {
            let created = server::store::create_database_if_missing(&settings).await?;
            let db = server::store::connect(&settings).await?;
            server::store::migrate(&settings, &db).await?;
            let name = settings.database_name()?;
            if created {
                println!("created database {name} and applied all migrations");
            } else {
                println!("database {name} is migrated");
            }
        }
        Command::User(UserCommand::Add(args)) => {
            let role = server::access::Role::parse(&args.role).map_err(|e| anyhow::anyhow!("--role: {e}"))?;
            let password = password_from(args.password_stdin)?;
            server::store::create_database_if_missing(&settings).await?;
            let db = server::store::connect(&settings).await?;
            server::store::migrate(&settings, &db).await?;
            server::access::create_user_audited(&db, &args.name, role, &password, "tessera user add")
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("created user {} with role {role}", args.name);
            if !args.password_stdin {
                println!("password (shown once): {password}");
            }
        }
        Command::User(UserCommand::ResetPassword(args)) => {
            let password = password_from(args.password_stdin)?;
            let db = server::store::connect(&settings).await?;
            let actor = "tessera user reset-password";
            let (ended, enabled) =
                server::access::reset_password_audited(&db, &args.name, &password, args.enable, actor)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("set the password of user {}; {ended} session(s) ended", args.name);
            if enabled {
                println!("enabled user {} again", args.name);
            }
            if !args.password_stdin {
                println!("password (shown once): {password}");
            }
        }
        Command::DemoSeed => {
            server::store::create_database_if_missing(&settings).await?;
            let db = server::store::connect(&settings).await?;
            server::store::migrate(&settings, &db).await?;
            let report = server::seed::demo_seed(&db).await?;
            for entity in &report.created {
                println!("seeded {entity}");
            }
            for entity in &report.kept {
                println!("kept {entity} (already present)");
            }
            for (name, role, password) in &report.users {
                println!("demo user {name} (role {role}), password (shown once): {password}");
            }
            // Deliver the seed's outbox rows now, as a running server's publisher would.
            let state = server::startup::build_state(&settings).await?;
            let done = server::publish::drain_outbox(&state).await?;
            for published in done.published {
                println!("published {published} to redis");
            }
            for entity in done.failed {
                println!("not yet published to redis: {entity} (the server's publisher retries)");
            }
        }
    }
    Ok(())
}

/// A user's password for `tessera user`: one line from stdin with --password-stdin,
/// otherwise generated (the caller prints it once).
fn password_from(stdin: bool) -> std::io::Result<String> {
    if !stdin {
        return Ok(server::access::random_secret(18));
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}
