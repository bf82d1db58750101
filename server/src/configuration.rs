//! Configuration: defaults, then an optional TOML file, then environment variables.
//!
//! Everything is parsed into validated types here, so the rest of the server never sees a
//! malformed prefix or address. Connection URLs may hold passwords: they are kept as
//! [`SecretString`] and never printed.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use client::pool::PoolName;
use client::KeyPrefix;
use engine::weights::Weights;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (development).
    Text,
    /// One JSON object per line (production, log shippers).
    Json,
}

mod access;
mod audit;
mod data_plane;
mod sentinel;

pub use access::{AdminAccess, AuthSettings};
use access::{FileAdmin, FileAuth};
pub use audit::AuditKey;
use data_plane::{quota_chunks, ticket_leases, FileLeases, FileQuota};
pub use sentinel::SentinelSettings;
use sentinel::{sentinel_settings, FileSentinel};

impl LogFormat {
    fn parse(field: &str, raw: &str) -> anyhow::Result<Self> {
        match raw {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => anyhow::bail!("{field}: must be \"text\" or \"json\", got {other:?}"),
        }
    }
}

/// The validated configuration of one `tessera` process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Postgres URL (`DATABASE_URL`); may hold a password, so kept secret.
    pub database_url: SecretString,
    /// The schema owner's URL, which creates the database and migrates
    /// (`database.migrate_url`, `TESSERA_MIGRATE_DATABASE_URL`); the server then serves as
    /// `DATABASE_URL`'s role, a member of `tessera_server`, which may append to the audit
    /// trail but not rewrite it. Unset: `DATABASE_URL`'s role migrates too (development).
    pub migrate_database_url: Option<SecretString>,
    /// The secret the audit chain is signed with (`TESSERA_AUDIT_KEY`); `None` writes
    /// unsigned rows (development; the server warns).
    pub audit_key: Option<AuditKey>,
    /// Redis URL (`REDIS_URL`); may hold a password, so kept secret.
    pub redis_url: SecretString,
    /// Redis Cluster seed nodes (`redis.cluster_nodes`, `TESSERA_REDIS_CLUSTER_NODES` as a
    /// comma-separated list). When any is given, Tessera runs on that cluster and
    /// `redis_url` is not used. URLs, may hold a password: kept secret.
    pub redis_cluster_nodes: Vec<SecretString>,
    /// Redis Sentinel (`redis.sentinel`: `master` and `nodes`; `TESSERA_REDIS_SENTINEL_MASTER`
    /// and `TESSERA_REDIS_SENTINELS`, comma-separated): the data plane's Redis is the primary
    /// the sentinels name for the master, followed across failovers, with `redis_url`'s
    /// user, password and database. Not with a cluster.
    pub redis_sentinel: Option<SentinelSettings>,
    /// Every Redis key starts with `<prefix>:` (`TESSERA_REDIS_PREFIX`).
    pub redis_prefix: KeyPrefix,
    /// Where HTTP listens (`TESSERA_BIND`).
    pub bind: SocketAddr,
    /// HTTP worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// Behind a reverse proxy: the header it writes the client's address in (for example
    /// `X-Forwarded-For`; the last address in it is taken), for the throttles at the door
    /// (`http.trusted_proxy_header`, `TESSERA_TRUSTED_PROXY_HEADER`). Unset: forwarded
    /// headers are never read and the peer's address is the client's.
    pub trusted_proxy_header: Option<String>,
    /// How many sign-ins, and as many unknown tokens or sessions, one client address may
    /// send at once before the door answers 429 (then one a second): `http.door_burst`,
    /// `TESSERA_DOOR_BURST`, 1..=1000000, default 30 (raise it for many people behind one NAT).
    pub door_burst: u32,
    /// Where scripts/build put the site (`pkg/` with the wasm, js and css).
    pub site_root: PathBuf,
    /// Text or JSON log lines (`TESSERA_LOG_FORMAT`).
    pub log_format: LogFormat,
    /// Which log lines are written, in `RUST_LOG` syntax (`TESSERA_LOG`).
    pub log_filter: String,
    /// The admin API's bearer token and the actor it stands for; `None` leaves the admin
    /// API's writes disabled (401).
    pub admin: Option<AdminAccess>,
    /// How long pool samples are kept (`TESSERA_SAMPLE_RETENTION_DAYS`, default 7 days).
    pub sample_retention: SampleRetention,
    /// How long the draw log and outcome minutes are kept (`TESSERA_DRAW_LOG_RETENTION_DAYS`, 7 days).
    pub draw_log_retention: SampleRetention,
    /// Logins, sessions and the development switch that opens the API.
    pub auth: AuthSettings,
    /// The file that keeps quota operations admitted while Redis is unreachable until they
    /// are charged to it, so a restart loses none (`quota.journal`, `TESSERA_QUOTA_JOURNAL`,
    /// default `data/quota-journal.log`; one process per file).
    pub quota_journal: PathBuf,
    /// Weights a pool is drawn by locally when Redis is unreachable and neither Redis nor
    /// Postgres ever gave this process a snapshot of it: the last resort of the data plane
    /// (`[static_weights]`, `TESSERA_STATIC_WEIGHTS`).
    pub static_weights: HashMap<PoolName, Weights>,
    /// Ticket leases of the draw path (`leases.tickets_max` > 0, `TESSERA_TICKET_LEASE_MAX`;
    /// hold `leases.ticket_hold_ms`, `TESSERA_TICKET_LEASE_HOLD_MS`, default 100): `None`, off.
    pub ticket_leases: Option<client::pool::LeaseSettings>,
    /// Hot tenants' reserves served from chunks of their tokens (`quota.hot_rate` reserves a
    /// second, `TESSERA_QUOTA_HOT_RATE`, and/or `quota.hot_tenants`, `TESSERA_QUOTA_HOT_TENANTS`;
    /// each chunk held `quota.chunk_lease_ms`, `TESSERA_QUOTA_CHUNK_LEASE_MS`, default 30,000):
    /// `None`, off.
    pub quota_chunks: Option<client::quota::ChunkSettings>,
    /// Where ramps announce what they do (`[ramps]`).
    pub ramps: RampSettings,
}

/// Ramp notifications: a webhook (Slack-compatible JSON) and the events sent to it.
#[derive(Debug, Clone, Default)]
pub struct RampSettings {
    /// `ramps.webhook_url` (`TESSERA_RAMP_WEBHOOK_URL`): `http` or `https`; none sends nothing.
    pub webhook_url: Option<url::Url>,
    /// `ramps.webhook_events` (`TESSERA_RAMP_WEBHOOK_EVENTS`, comma-separated): of
    /// [`RAMP_EVENTS`]; default all of them.
    pub webhook_events: Vec<String>,
}

/// The events a ramp announces.
pub const RAMP_EVENTS: [&str; 5] = ["step", "breach", "pause", "abort", "complete"];

impl RampSettings {
    fn parse(url: Option<String>, events: Option<Vec<String>>, events_field: &str) -> anyhow::Result<Self> {
        let webhook_url = match url.filter(|u| !u.trim().is_empty()) {
            None => None,
            Some(raw) => {
                let parsed = url::Url::parse(raw.trim())
                    .map_err(|e| anyhow::anyhow!("ramps.webhook_url (TESSERA_RAMP_WEBHOOK_URL): not a URL ({e})"))?;
                anyhow::ensure!(
                    matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
                    "ramps.webhook_url (TESSERA_RAMP_WEBHOOK_URL): must be an http or https URL with a host"
                );
                Some(parsed)
            }
        };
        let webhook_events = match events {
            None => RAMP_EVENTS.iter().map(|e| (*e).to_owned()).collect(),
            Some(list) => {
                let mut out = Vec::new();
                for event in list.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
                    anyhow::ensure!(
                        RAMP_EVENTS.contains(&event),
                        "{events_field}: {event:?} is not one of {}",
                        RAMP_EVENTS.join(", ")
                    );
                    if !out.iter().any(|e| e == event) {
                        out.push(event.to_owned());
                    }
                }
                out
            }
        };
        Ok(Self { webhook_url, webhook_events })
    }

    /// Whether `event` is announced.
    pub fn announces(&self, event: &str) -> bool {
        self.webhook_url.is_some() && self.webhook_events.iter().any(|e| e == event)
    }
}

/// How long the sampler's (or the draw log's) rows are kept before the daily prune: 1..=365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRetention(u32);

impl SampleRetention {
    /// A week: enough for the dashboard's charts and a weekly review.
    pub const DEFAULT: Self = Self(7);

    /// Parses a number of days, naming `field` and the rule when refused.
    pub fn parse(field: &str, raw: &str) -> anyhow::Result<Self> {
        raw.trim()
            .parse::<u32>()
            .ok()
            .filter(|days| (1..=365).contains(days))
            .map(Self)
            .ok_or_else(|| anyhow::anyhow!("{field}: must be a whole number of days in 1..=365, got {raw:?}"))
    }

    /// The retention in days.
    pub fn days(self) -> u32 {
        self.0
    }
}

/// The file's shape: every field optional, unknown fields refused (a typo must not be
/// silently ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    #[serde(default)]
    database: FileDatabase,
    #[serde(default)]
    redis: FileRedis,
    #[serde(default)]
    http: FileHttp,
    #[serde(default)]
    log: FileLog,
    #[serde(default)]
    admin: FileAdmin,
    #[serde(default)]
    samples: FileSamples,
    #[serde(default)]
    draws: FileSamples,
    #[serde(default)]
    auth: FileAuth,
    #[serde(default)]
    quota: FileQuota,
    #[serde(default)]
    ramps: FileRamps,
    #[serde(default)]
    leases: FileLeases,
    /// Pool name → weights spec (`"A=5,B=3"`, the order kept as written).
    #[serde(default)]
    static_weights: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRamps {
    webhook_url: Option<String>,
    webhook_events: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSamples {
    retention_days: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDatabase {
    url: Option<String>,
    migrate_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRedis {
    url: Option<String>,
    cluster_nodes: Option<Vec<String>>,
    sentinel: Option<FileSentinel>,
    prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHttp {
    bind: Option<String>,
    workers: Option<usize>,
    site_root: Option<String>,
    trusted_proxy_header: Option<String>,
    door_burst: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    format: Option<String>,
    filter: Option<String>,
}

/// Defaults used when neither the file nor the environment says otherwise.
pub mod defaults {
    #![allow(missing_docs)] // each constant is the default of the field it is named after
    pub const DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/tessera";
    pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
    pub const REDIS_PREFIX: &str = "tessera";
    pub const BIND: &str = "127.0.0.1:3000";
    pub const SITE_ROOT: &str = "target/site";
    pub const LOG_FILTER: &str = "info,sqlx=warn";
    pub const QUOTA_JOURNAL: &str = "data/quota-journal.log";
}

impl Settings {
    /// Loads the configuration: `path` (if given, it must exist), else `tessera.toml` in
    /// the working directory if present; then the environment.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        let file = match path {
            Some(path) => Some(read_file(path)?),
            None => {
                let default = Path::new("tessera.toml");
                if default.exists() {
                    Some(read_file(default)?)
                } else {
                    None
                }
            }
        };
        Self::from_sources(file.unwrap_or_default(), |name| std::env::var(name).ok())
    }

    /// Parses a TOML document plus an environment lookup; the seam the tests use.
    pub fn from_toml_and_env(toml_text: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let file: FileSettings = parse_toml(toml_text).context("parsing configuration")?;
        Self::from_sources(file, env)
    }

    fn from_sources(file: FileSettings, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let pick = |var: &str, from_file: Option<String>, default: &str| {
            env(var).filter(|v| !v.is_empty()).or(from_file).unwrap_or_else(|| default.to_owned())
        };
        let database_url = pick("DATABASE_URL", file.database.url, defaults::DATABASE_URL);
        check_url("database.url (DATABASE_URL)", &database_url, &["postgres", "postgresql"])?;
        let migrate_database_url = audit::migrate_url(&env, file.database.migrate_url)?;
        let audit_key = audit::key(&env)?;
        let redis_url = pick("REDIS_URL", file.redis.url, defaults::REDIS_URL);
        check_url("redis.url (REDIS_URL)", &redis_url, &["redis", "rediss", "redis+unix", "unix"])?;
        let redis_cluster_nodes = match env("TESSERA_REDIS_CLUSTER_NODES").filter(|v| !v.trim().is_empty()) {
            Some(raw) => raw.split(',').map(|n| n.trim().to_owned()).collect(),
            None => file.redis.cluster_nodes.unwrap_or_default(),
        };
        const CLUSTER_NODES: &str = "redis.cluster_nodes (TESSERA_REDIS_CLUSTER_NODES)";
        anyhow::ensure!(
            redis_cluster_nodes.len() <= 64,
            "{CLUSTER_NODES}: at most 64 seed nodes, got {}",
            redis_cluster_nodes.len()
        );
        for (i, node) in redis_cluster_nodes.iter().enumerate() {
            check_url(&format!("{CLUSTER_NODES}[{i}]"), node, &["redis", "rediss"])?;
        }
        let redis_sentinel = sentinel_settings(file.redis.sentinel, &env)?;
        anyhow::ensure!(
            redis_sentinel.is_none() || redis_cluster_nodes.is_empty(),
            "redis.sentinel (TESSERA_REDIS_SENTINELS) and {CLUSTER_NODES}: configure one of them, not both"
        );
        let prefix = pick("TESSERA_REDIS_PREFIX", file.redis.prefix, defaults::REDIS_PREFIX);
        let redis_prefix =
            KeyPrefix::parse(&prefix).map_err(|e| anyhow::anyhow!("redis.prefix (TESSERA_REDIS_PREFIX): {e}"))?;
        let bind_raw = pick("TESSERA_BIND", file.http.bind, defaults::BIND);
        let bind: SocketAddr = bind_raw.parse().map_err(|_| {
            anyhow::anyhow!(
                "http.bind (TESSERA_BIND): must be an IP address and port such as 127.0.0.1:3000, got {bind_raw:?}"
            )
        })?;
        let workers = match env("TESSERA_WORKERS").filter(|v| !v.is_empty()) {
            Some(raw) => Some(raw.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                anyhow::anyhow!("http.workers (TESSERA_WORKERS): must be a whole number >= 1, got {raw:?}")
            })?),
            None => file.http.workers,
        };
        if workers == Some(0) {
            anyhow::bail!("http.workers: must be >= 1");
        }
        let trusted_proxy_header =
            match env("TESSERA_TRUSTED_PROXY_HEADER").filter(|v| !v.is_empty()).or(file.http.trusted_proxy_header) {
                None => None,
                Some(name) => {
                    anyhow::ensure!(
                        actix_web::http::header::HeaderName::from_bytes(name.as_bytes()).is_ok(),
                        "http.trusted_proxy_header (TESSERA_TRUSTED_PROXY_HEADER): must be a header name such as \
                         X-Forwarded-For, got {name:?}"
                    );
                    Some(name.to_ascii_lowercase())
                }
            };
        let door_burst = match env("TESSERA_DOOR_BURST").filter(|v| !v.is_empty()) {
            Some(raw) => raw.parse::<u32>().ok().filter(|n| (1..=1_000_000).contains(n)).ok_or_else(|| {
                anyhow::anyhow!("http.door_burst (TESSERA_DOOR_BURST): must be in 1..=1000000, got {raw:?}")
            })?,
            None => file.http.door_burst.unwrap_or(crate::throttle::DEFAULT_ADDRESS_BURST),
        };
        anyhow::ensure!((1..=1_000_000).contains(&door_burst), "http.door_burst: must be in 1..=1000000");
        let site_root = PathBuf::from(pick(
            "TESSERA_SITE_ROOT",
            file.http.site_root.or_else(|| env("LEPTOS_SITE_ROOT")),
            defaults::SITE_ROOT,
        ));
        let log_format =
            LogFormat::parse("log.format (TESSERA_LOG_FORMAT)", &pick("TESSERA_LOG_FORMAT", file.log.format, "text"))?;
        let log_filter = pick("TESSERA_LOG", file.log.filter, defaults::LOG_FILTER);
        let admin = access::admin(&env, file.admin)?;
        let retention = |variable: &str, field: &str, days: Option<u32>| match env(variable).filter(|v| !v.is_empty()) {
            Some(raw) => SampleRetention::parse(&format!("{field} ({variable})"), &raw),
            None => days.map_or(Ok(SampleRetention::DEFAULT), |d| SampleRetention::parse(field, &d.to_string())),
        };
        let sample_retention =
            retention("TESSERA_SAMPLE_RETENTION_DAYS", "samples.retention_days", file.samples.retention_days)?;
        let draw_log_retention =
            retention("TESSERA_DRAW_LOG_RETENTION_DAYS", "draws.retention_days", file.draws.retention_days)?;
        let auth = access::auth(&env, file.auth)?;
        let ramps = match env("TESSERA_RAMP_WEBHOOK_EVENTS").filter(|v| !v.is_empty()) {
            Some(raw) => RampSettings::parse(
                env("TESSERA_RAMP_WEBHOOK_URL").filter(|v| !v.is_empty()).or(file.ramps.webhook_url),
                Some(raw.split(',').map(str::to_owned).collect()),
                "ramps.webhook_events (TESSERA_RAMP_WEBHOOK_EVENTS)",
            )?,
            None => RampSettings::parse(
                env("TESSERA_RAMP_WEBHOOK_URL").filter(|v| !v.is_empty()).or(file.ramps.webhook_url),
                file.ramps.webhook_events,
                "ramps.webhook_events",
            )?,
        };
        Ok(Self {
            ramps,
            auth,
            database_url: SecretString::from(database_url),
            migrate_database_url,
            audit_key,
            redis_url: SecretString::from(redis_url),
            redis_cluster_nodes: redis_cluster_nodes.into_iter().map(SecretString::from).collect(),
            redis_sentinel,
            redis_prefix,
            bind,
            workers,
            trusted_proxy_header,
            door_burst,
            site_root,
            log_format,
            log_filter,
            admin,
            sample_retention,
            draw_log_retention,
            quota_journal: PathBuf::from(pick(
                "TESSERA_QUOTA_JOURNAL",
                file.quota.journal.clone(),
                defaults::QUOTA_JOURNAL,
            )),
            ticket_leases: ticket_leases(&env, &file.leases)?,
            quota_chunks: quota_chunks(&env, &file.quota)?,
            static_weights: match env("TESSERA_STATIC_WEIGHTS").filter(|v| !v.trim().is_empty()) {
                Some(raw) => parse_static_weights_env(&raw)?,
                None => parse_static_weights(
                    "static_weights",
                    file.static_weights.iter().map(|(p, w)| (p.as_str(), w.as_str())),
                )?,
            },
        })
    }

    /// The database name in `database_url` (for creating it when missing).
    pub fn database_name(&self) -> anyhow::Result<String> {
        let url = self.database_url.expose_secret();
        let path = url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(_, path)| path.split(['?', '#']).next().unwrap_or(""))
            .unwrap_or("");
        anyhow::ensure!(
            !path.is_empty(),
            "database.url (DATABASE_URL): must name a database, e.g. postgres://user@host/tessera"
        );
        Ok(path.to_owned())
    }

    /// The Redis the data plane uses: the cluster when seed nodes are configured, the
    /// primary Sentinel names when sentinels are, else the one server of `redis_url`.
    pub fn redis_target(&self, timeouts: client::RedisTimeouts) -> anyhow::Result<client::RedisTarget> {
        if let Some(sentinel) = &self.redis_sentinel {
            let nodes: Vec<String> = sentinel.nodes.iter().map(|n| n.expose_secret().to_owned()).collect();
            return client::RedisTarget::sentinel(&nodes, &sentinel.master, self.redis_url.expose_secret())
                .context("redis.sentinel.nodes (TESSERA_REDIS_SENTINELS): not valid Redis URLs");
        }
        if self.redis_cluster_nodes.is_empty() {
            let client = redis::Client::open(self.redis_url.expose_secret())
                .context("redis.url (REDIS_URL): not a valid Redis URL")?;
            return Ok(client::RedisTarget::Single(client));
        }
        let nodes: Vec<String> = self.redis_cluster_nodes.iter().map(|n| n.expose_secret().to_owned()).collect();
        client::RedisTarget::cluster(&nodes, timeouts)
            .context("redis.cluster_nodes (TESSERA_REDIS_CLUSTER_NODES): not valid Redis URLs")
    }

    /// A description safe to log: hosts and names, never passwords.
    pub fn redacted_summary(&self) -> String {
        let redis = if let Some(sentinel) = &self.redis_sentinel {
            let nodes: Vec<String> = sentinel.nodes.iter().map(|n| redact(n.expose_secret())).collect();
            format!("sentinel({} at {})", sentinel.master, nodes.join(","))
        } else if self.redis_cluster_nodes.is_empty() {
            redact(self.redis_url.expose_secret())
        } else {
            let nodes: Vec<String> = self.redis_cluster_nodes.iter().map(|n| redact(n.expose_secret())).collect();
            format!("cluster({})", nodes.join(","))
        };
        format!(
            "database={} redis={} prefix={} bind={}",
            redact(self.database_url.expose_secret()),
            redis,
            self.redis_prefix,
            self.bind
        )
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileSettings> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading configuration file {}", path.display()))?;
    parse_toml(&text).with_context(|| format!("parsing configuration file {}", path.display()))
}

/// Parses the file; the error names the line and the rule but never quotes the line,
/// which may hold a password.
fn parse_toml(text: &str) -> anyhow::Result<FileSettings> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| text[..span.start.min(text.len())].lines().count().max(1));
        match line {
            Some(line) => anyhow::anyhow!("line {line}: {}", e.message()),
            None => anyhow::anyhow!("{}", e.message()),
        }
    })
}

/// `TESSERA_STATIC_WEIGHTS`: `pool:A=1,B=3;other:X=2` (it replaces the file's table).
fn parse_static_weights_env(raw: &str) -> anyhow::Result<HashMap<PoolName, Weights>> {
    const FIELD: &str = "static_weights (TESSERA_STATIC_WEIGHTS)";
    let mut entries = Vec::new();
    for part in raw.split(';').filter(|p| !p.trim().is_empty()) {
        let (pool, spec) = part.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("{FIELD}: each pool must be written POOL:MEMBER=WEIGHT,…, got {:?}", part.trim())
        })?;
        entries.push((pool.trim(), spec));
    }
    parse_static_weights(FIELD, entries)
}

/// Parses pool names and weight specs, naming the field, the pool and the rule broken.
fn parse_static_weights<'a>(
    field: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> anyhow::Result<HashMap<PoolName, Weights>> {
    let mut out = HashMap::new();
    for (pool, spec) in entries {
        let name = PoolName::parse(pool).map_err(|e| anyhow::anyhow!("{field}: pool {pool:?}: {e}"))?;
        let weights = Weights::parse_spec(spec).map_err(|e| anyhow::anyhow!("{field}.{pool}: {e}"))?;
        anyhow::ensure!(out.insert(name, weights).is_none(), "{field}: pool {pool:?} is given twice");
    }
    Ok(out)
}

fn check_url(field: &str, url: &str, schemes: &[&str]) -> anyhow::Result<()> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    anyhow::ensure!(
        schemes.contains(&scheme),
        "{field}: must be a URL with scheme {}, got a value starting {:?}",
        schemes.join(" or "),
        scheme
    );
    Ok(())
}

/// The URL with any password masked, safe to log: `postgres://app:***@db/tessera`.
/// Query parameters are dropped (they may carry `password=`), and anything that does not
/// parse as a URL is shown as `***`.
pub fn redact(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return "***".to_owned();
    };
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_apply_when_nothing_is_configured() {
        let s = Settings::from_toml_and_env("", no_env).unwrap();
        assert_eq!(s.bind.to_string(), "127.0.0.1:3000");
        assert_eq!(s.redis_prefix.as_str(), "tessera");
        assert_eq!(s.database_name().unwrap(), "tessera");
    }

    #[test]
    fn open_mode_is_refused_from_the_file_and_the_environment() {
        let err = Settings::from_toml_and_env("[auth]\nopen = false\n", no_env).unwrap_err().to_string();
        assert!(err.contains("auth.open (TESSERA_OPEN) is refused") && err.contains("--open"), "{err}");
        let env = |name: &str| (name == "TESSERA_OPEN").then(|| "1".to_owned());
        assert!(Settings::from_toml_and_env("", env).is_err());
        assert!(!Settings::from_toml_and_env("", no_env).unwrap().auth.open);
    }

    #[test]
    fn quota_chunks_are_off_by_default_read_from_the_file_and_the_environment_and_refused_by_name() {
        assert!(Settings::from_toml_and_env("", no_env).unwrap().quota_chunks.is_none(), "off by default");
        let toml = "[quota]\nhot_tenants = [\"acme\", \"beta\"]\nchunk_lease_ms = 5000\n";
        let chunks = Settings::from_toml_and_env(toml, no_env).unwrap().quota_chunks.expect("on");
        assert_eq!(chunks.hot().len(), 2);
        assert_eq!((chunks.hot_rate(), chunks.lease()), (0, std::time::Duration::from_secs(5)));

        let env = |name: &str| (name == "TESSERA_QUOTA_HOT_RATE").then(|| "250".to_owned());
        let chunks = Settings::from_toml_and_env("", env).unwrap().quota_chunks.expect("on by rate");
        assert_eq!((chunks.hot_rate(), chunks.lease()), (250, std::time::Duration::from_secs(30)));

        let env = |name: &str| (name == "TESSERA_QUOTA_HOT_TENANTS").then(|| "acme,bad name".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("quota.hot_tenants (TESSERA_QUOTA_HOT_TENANTS)") && err.contains("bad name"), "{err}");
        let err = Settings::from_toml_and_env("[quota]\nhot_rate = 5\nchunk_lease_ms = 10\n", no_env).unwrap_err();
        assert!(err.to_string().contains("quota.chunk_lease_ms (TESSERA_QUOTA_CHUNK_LEASE_MS)"), "{err}");
    }

    #[test]
    fn cluster_nodes_and_ticket_leases_are_read_and_refused_by_name() {
        let toml = "[redis]\ncluster_nodes = [\"redis://127.0.0.1:7000\"]\n[leases]\ntickets_max = 64\n";
        let s = Settings::from_toml_and_env(toml, no_env).unwrap();
        assert_eq!(s.redis_cluster_nodes.len(), 1);
        assert!(s.redacted_summary().contains("cluster(redis://127.0.0.1:7000"), "{}", s.redacted_summary());
        let leases = s.ticket_leases.expect("leases on");
        assert_eq!((leases.max, leases.hold), (64, std::time::Duration::from_millis(100)));
        assert!(Settings::from_toml_and_env("", no_env).unwrap().ticket_leases.is_none(), "off by default");

        let env = |name: &str| match name {
            "TESSERA_REDIS_CLUSTER_NODES" => Some("redis://a:1, http://b:2".to_owned()),
            _ => None,
        };
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("redis.cluster_nodes (TESSERA_REDIS_CLUSTER_NODES)[1]"), "{err}");
        let env = |name: &str| (name == "TESSERA_TICKET_LEASE_MAX").then(|| "5000".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("leases.tickets_max (TESSERA_TICKET_LEASE_MAX)") && err.contains("0 to 4096"), "{err}");
    }

    #[test]
    fn a_sentinel_is_read_from_the_file_or_the_environment_and_refused_by_name() {
        let toml = "[redis.sentinel]\nmaster = \"payments\"\nnodes = [\"redis://127.0.0.1:26379\"]\n";
        let s = Settings::from_toml_and_env(toml, no_env).unwrap();
        let sentinel = s.redis_sentinel.as_ref().expect("sentinel on");
        assert_eq!((sentinel.master.as_str(), sentinel.nodes.len()), ("payments", 1));
        assert!(
            s.redacted_summary().contains("sentinel(payments at redis://127.0.0.1:26379"),
            "{}",
            s.redacted_summary()
        );
        assert!(Settings::from_toml_and_env("", no_env).unwrap().redis_sentinel.is_none(), "off by default");
        let refused = |env: &'static [(&'static str, &'static str)], toml: &str| {
            let env = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned());
            Settings::from_toml_and_env(toml, env).unwrap_err().to_string()
        };
        let err = refused(&[("TESSERA_REDIS_SENTINELS", "redis://a:1")], "");
        assert!(err.contains("redis.sentinel.master (TESSERA_REDIS_SENTINEL_MASTER): required"), "{err}");
        let err = refused(&[("TESSERA_REDIS_SENTINEL_MASTER", "m")], "");
        assert!(err.contains("redis.sentinel.nodes (TESSERA_REDIS_SENTINELS): required"), "{err}");
        let err =
            refused(&[("TESSERA_REDIS_SENTINEL_MASTER", "m"), ("TESSERA_REDIS_SENTINELS", "redis://a:1,http://b")], "");
        assert!(err.contains("redis.sentinel.nodes (TESSERA_REDIS_SENTINELS)[1]"), "{err}");
        let err = refused(&[("TESSERA_REDIS_SENTINEL_MASTER", "a b"), ("TESSERA_REDIS_SENTINELS", "redis://a:1")], "");
        assert!(err.contains("redis.sentinel.master (TESSERA_REDIS_SENTINEL_MASTER): must be"), "{err}");
        let both = "[redis]\ncluster_nodes = [\"redis://127.0.0.1:7000\"]\n";
        let err = refused(&[("TESSERA_REDIS_SENTINEL_MASTER", "m"), ("TESSERA_REDIS_SENTINELS", "redis://a:1")], both);
        assert!(err.contains("not both"), "{err}");
    }

    #[test]
    fn environment_variables_override_the_file() {
        let toml = "[redis]\nprefix = \"fromfile\"\n[http]\nbind = \"127.0.0.1:4000\"\n";
        let env = |name: &str| match name {
            "TESSERA_REDIS_PREFIX" => Some("fromenv".to_owned()),
            _ => None,
        };
        let s = Settings::from_toml_and_env(toml, env).unwrap();
        assert_eq!(s.redis_prefix.as_str(), "fromenv");
        assert_eq!(s.bind.to_string(), "127.0.0.1:4000");
    }

    #[test]
    fn a_bad_value_is_refused_naming_the_field_and_the_rule() {
        let env = |name: &str| (name == "TESSERA_BIND").then(|| "localhost".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("http.bind (TESSERA_BIND)"), "{err}");
        let env = |name: &str| (name == "TESSERA_REDIS_PREFIX").then(|| "a{b}".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("redis.prefix") && err.contains("'{'"), "{err}");
        let err = Settings::from_toml_and_env("[http]\nbindd = \"x\"\n", no_env).unwrap_err();
        assert!(format!("{err:#}").contains("unknown field"), "{err:#}");
    }

    #[test]
    fn the_ramp_webhook_is_an_http_url_and_its_events_are_known_ones() {
        let s = Settings::from_toml_and_env("", no_env).unwrap();
        assert!(s.ramps.webhook_url.is_none() && !s.ramps.announces("step"));
        let file = "[ramps]\nwebhook_url = \"https://hooks.example.com/x\"\nwebhook_events = [\"abort\"]\n";
        let s = Settings::from_toml_and_env(file, no_env).unwrap();
        assert!(s.ramps.announces("abort") && !s.ramps.announces("step"));
        let env = |name: &str| (name == "TESSERA_RAMP_WEBHOOK_EVENTS").then(|| "step, breach".to_owned());
        let s = Settings::from_toml_and_env(file, env).unwrap();
        assert_eq!(s.ramps.webhook_events, ["step", "breach"]);
        let err = Settings::from_toml_and_env("[ramps]\nwebhook_url = \"file:///etc/passwd\"\n", no_env).unwrap_err();
        assert!(format!("{err:#}").contains("ramps.webhook_url (TESSERA_RAMP_WEBHOOK_URL)"), "{err:#}");
        let err = Settings::from_toml_and_env("[ramps]\nwebhook_events = [\"everything\"]\n", no_env).unwrap_err();
        assert!(format!("{err:#}").contains("ramps.webhook_events"), "{err:#}");
    }

    #[test]
    fn sample_retention_defaults_to_a_week_and_refuses_zero_naming_the_variable() {
        assert_eq!(Settings::from_toml_and_env("", no_env).unwrap().sample_retention.days(), 7);
        let s = Settings::from_toml_and_env("[samples]\nretention_days = 30\n", no_env).unwrap();
        assert_eq!(s.sample_retention.days(), 30);
        let env = |name: &str| (name == "TESSERA_SAMPLE_RETENTION_DAYS").then(|| "0".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("TESSERA_SAMPLE_RETENTION_DAYS") && err.contains("1..=365"), "{err}");
        let s = Settings::from_toml_and_env("[draws]\nretention_days = 30\n", no_env).unwrap();
        assert_eq!((s.draw_log_retention.days(), s.sample_retention.days()), (30, 7));
        let env = |name: &str| (name == "TESSERA_DRAW_LOG_RETENTION_DAYS").then(|| "366".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("draws.retention_days (TESSERA_DRAW_LOG_RETENTION_DAYS)"), "{err}");
    }

    #[test]
    fn static_weights_come_from_the_file_or_the_environment_and_errors_name_the_pool() {
        assert!(Settings::from_toml_and_env("", no_env).unwrap().static_weights.is_empty());
        let toml = "[static_weights]\nedge = \"EDGE_B=3, EDGE_A=1\"\n";
        let s = Settings::from_toml_and_env(toml, no_env).unwrap();
        let edge = &s.static_weights[&PoolName::parse("edge").unwrap()];
        assert_eq!(edge.members(), ["EDGE_B", "EDGE_A"], "the order is kept as written");
        assert_eq!(edge.weights(), [3, 1]);
        let env = |name: &str| (name == "TESSERA_STATIC_WEIGHTS").then(|| "a:X=1,Y=2; b:Z=5".to_owned());
        let s = Settings::from_toml_and_env(toml, env).unwrap();
        assert_eq!(s.static_weights.len(), 2, "the environment replaces the file's table");
        assert_eq!(s.static_weights[&PoolName::parse("b").unwrap()].members(), ["Z"]);
        let err = Settings::from_toml_and_env("[static_weights]\nedge = \"A=0\"\n", no_env).unwrap_err();
        assert!(err.to_string().contains("static_weights.edge"), "{err}");
        let env = |name: &str| (name == "TESSERA_STATIC_WEIGHTS").then(|| "bad pool!:A=1".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("TESSERA_STATIC_WEIGHTS") && err.contains("bad pool!"), "{err}");
        let env = |name: &str| (name == "TESSERA_STATIC_WEIGHTS").then(|| "A=1".to_owned());
        let err = Settings::from_toml_and_env("", env).unwrap_err().to_string();
        assert!(err.contains("POOL:MEMBER=WEIGHT"), "{err}");
    }

    #[test]
    fn secrets_never_appear_in_debug_or_summary_output() {
        let env = |name: &str| match name {
            "DATABASE_URL" => Some("postgres://app:hunter2@db:5432/tessera".to_owned()),
            "REDIS_URL" => Some("redis://:s3cret@cache:6379/0".to_owned()),
            _ => None,
        };
        let s = Settings::from_toml_and_env("", env).unwrap();
        let shown = format!("{s:?} {}", s.redacted_summary());
        assert!(!shown.contains("hunter2") && !shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("postgres://app:***@db:5432/tessera"), "{shown}");
    }

    #[test]
    fn passwords_in_query_strings_or_with_odd_characters_are_not_shown() {
        assert_eq!(redact("postgres://app@db/tessera?password=hunter2"), "postgres://app@db/tessera");
        assert!(!redact("postgres://app:pa/ss?w#rd@db/tessera").contains("ss?w"));
        assert_eq!(redact("not a url hunter2"), "***");
        let err = Settings::from_toml_and_env("[database]\nurl = \"postgres://u:hunter2@db/x\"\nbogus\n", no_env)
            .unwrap_err();
        let shown = format!("{err:#}");
        assert!(!shown.contains("hunter2") && shown.contains("line 3"), "{shown}");
    }
}
