//! `tessera bench`: throughput and correctness runs of the data plane, each against a
//! baseline measured in the same run, under a key prefix of its own that is removed after.

pub mod draw;
pub mod markers;
pub mod publish;
pub mod quota;
pub mod recover;
pub mod recover_quota;
pub mod spent;
pub mod ui;

use std::future::Future;

use anyhow::Context;
use client::{KeyPrefix, Keys, RedisHandle};
use secrecy::{ExposeSecret, SecretString};

use crate::configuration::{AdminAccess, Settings};
use crate::startup::{Application, Signals};
use crate::state::AppState;

/// A fresh key prefix for one benchmark run.
pub(crate) fn run_prefix(kind: &str) -> KeyPrefix {
    let tag: u32 = rand::random();
    KeyPrefix::parse(&format!("bench-{kind}-{tag:08x}")).expect("valid prefix")
}

/// Removes every key of a run (SCAN + UNLINK under its prefix on every primary; never
/// FLUSHDB).
pub(crate) async fn remove_keys(redis: &RedisHandle, keys: &Keys) -> anyhow::Result<u64> {
    let mut conn = redis.connection().await?;
    Ok(conn.unlink_matching(&keys.scan_pattern()).await?)
}

/// CPU time this process has spent so far (user + system, every thread), in microseconds;
/// 0 where `/proc/self/stat` cannot be read. Linux counts it in ticks of 10 ms.
pub(crate) fn process_cpu_us() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    // The fields after the command name (which may hold spaces, closed by the last ')'):
    // utime and stime are the 12th and 13th of them.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0 };
    let fields: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
    fields.iter().sum::<u64>() * 10_000
}

/// The value at quantile `q` (0..=1) of sorted durations, in microseconds.
pub(crate) fn quantile_us(sorted: &[std::time::Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// What a benchmark on a server of its own gets: the server's state, its address
/// (`http://127.0.0.1:port`) and an admin-scope bearer token.
pub(crate) struct OwnServer {
    pub state: AppState,
    pub address: String,
    pub token: String,
}

/// Runs `measure` against an in-process server on a free loopback port, with a database
/// of its own (created, then dropped: the audit trail is append-only, so a benchmark must
/// not write into a real one) and a key prefix of its own (removed after), optionally with
/// the scheduler running beside it. `adjust` changes the settings first (e.g. open mode).
pub(crate) async fn on_own_server<T, F, Fut>(
    settings: &Settings,
    kind: &str,
    with_scheduler: bool,
    adjust: impl FnOnce(&mut Settings),
    measure: F,
) -> anyhow::Result<T>
where
    F: FnOnce(OwnServer) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let prefix = run_prefix(kind);
    let mut settings = settings.clone();
    let db_name = format!("tessera_{}", prefix.as_str().replace('-', "_"));
    let admin_url = with_database(settings.database_url.expose_secret(), "postgres")?;
    settings.database_url = SecretString::from(with_database(settings.database_url.expose_secret(), &db_name)?);
    settings.redis_prefix = prefix;
    settings.bind = "127.0.0.1:0".parse().expect("valid address");
    let token = format!("bench-{:032x}", rand::random::<u128>());
    settings.admin = Some(AdminAccess { token: SecretString::from(token.clone()), actor: "bench".into() });
    adjust(&mut settings);
    crate::store::create_database_if_missing(&settings).await?;

    let result = async {
        let application = Application::build(&settings, Signals::Ignore).await?;
        let state = application.state().clone();
        let address = format!("http://127.0.0.1:{}", application.port());
        let handle = application.handle();
        let server = tokio::spawn(application.run_until_stopped());
        let scheduler = if with_scheduler { Some(crate::jobs::Scheduler::start(state.clone()).await?) } else { None };
        let measured = measure(OwnServer { state: state.clone(), address, token }).await;
        if let Some(scheduler) = scheduler {
            scheduler.shutdown().await;
        }
        handle.stop(true).await;
        let _ = server.await;
        let cleanup = remove_keys(&state.redis, &state.keys).await;
        state.db.close().await;
        cleanup.context("removing the benchmark's keys")?;
        measured
    }
    .await;

    use sqlx::Connection;
    let mut admin =
        sqlx::PgConnection::connect(&admin_url).await.context("connecting to drop the benchmark database")?;
    crate::store::drop_database(&mut admin, &db_name).await.context("dropping the benchmark database")?;
    result
}

/// `url` with its database name replaced.
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let mut parsed = url::Url::parse(url).context("database.url")?;
    parsed.set_path(&format!("/{name}"));
    Ok(parsed.to_string())
}
