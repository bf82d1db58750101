//! Postgres itself: connecting, creating the database, migrations, advisory locks.

use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::migrate::MigrateDatabase;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres};

use crate::configuration::Settings;

/// Every migration in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Session settings every connection of the pool (and each leader's own connection, which
/// reuses the pool's options) asks Postgres for. A statement runs at most 30 s, so a stuck
/// query turns into an error instead of holding a connection for good. Postgres probes an
/// idle connection after 30 s, every 10 s, 3 times, so the session of an instance that
/// vanished without closing its socket, and the advisory locks it holds (job leadership),
/// end within about a minute. sqlx has no client-side keepalive option, hence the
/// server-side settings. A transaction left idle for a minute is ended, so one that holds
/// the audit chain's lock (every audited write waits for it) cannot hold it for good. A
/// setting the URL already gives (`?options=-c name=value`) wins.
pub const SESSION_SETTINGS: [(&str, &str); 5] = [
    ("statement_timeout", "30s"),
    ("idle_in_transaction_session_timeout", "60s"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
];

/// An `ilike` pattern matching text that holds `search` anywhere; `%`, `_` and `\` typed
/// in the search match themselves.
pub fn like_pattern(search: &str) -> String {
    format!("%{}%", search.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"))
}

/// Opens the connection pool. Acquiring a connection waits at most 3 s, so a Postgres
/// outage turns into quick errors (and a 503) rather than hung requests.
pub async fn connect(settings: &Settings) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = settings
        .database_url
        .expose_secret()
        .parse()
        .context("database.url (DATABASE_URL): not a valid Postgres URL")?;
    let options = with_session_settings(options);
    PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await
        .with_context(|| {
            format!("connecting to Postgres at {}", crate::configuration::redact(settings.database_url.expose_secret()))
        })
}

/// The small pool that sign-ins, sessions and API tokens are checked through, apart from
/// the jobs' and the UI's: a flood at the door waits for these few connections and takes
/// none of the others. Connected on first use.
pub fn connect_auth(settings: &Settings) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = settings
        .database_url
        .expose_secret()
        .parse()
        .context("database.url (DATABASE_URL): not a valid Postgres URL")?;
    Ok(PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy_with(with_session_settings(options)))
}

/// `options` plus each of [`SESSION_SETTINGS`] that its own startup options do not set.
fn with_session_settings(options: PgConnectOptions) -> PgConnectOptions {
    let given = options.get_options().unwrap_or_default().to_owned();
    let missing = SESSION_SETTINGS.into_iter().filter(|(name, _)| !given.contains(&format!("{name}=")));
    options.options(missing)
}

/// The URL of the role that owns the schema: `database.migrate_url` when set, else
/// `DATABASE_URL` (one role for everything, in development).
fn owner_url(settings: &Settings) -> &str {
    settings.migrate_database_url.as_ref().unwrap_or(&settings.database_url).expose_secret()
}

/// Creates the configured database when it does not exist yet (as the schema's owner).
#[tracing::instrument(skip_all, err)]
pub async fn create_database_if_missing(settings: &Settings) -> anyhow::Result<bool> {
    let url = owner_url(settings);
    let exists = Postgres::database_exists(url).await.with_context(|| {
        format!("checking whether database {} exists", settings.database_name().unwrap_or_default())
    })?;
    if exists {
        return Ok(false);
    }
    Postgres::create_database(url)
        .await
        .with_context(|| format!("creating database {}", settings.database_name().unwrap_or_default()))?;
    tracing::info!(database = %settings.database_name()?, "created database");
    Ok(true)
}

/// Applies every pending migration as the schema's owner: through `database.migrate_url`
/// on a connection of its own when it is set (the server's pool `db` belongs to a role that
/// may not migrate), else through `db`.
#[tracing::instrument(skip_all, err)]
pub async fn migrate(settings: &Settings, db: &PgPool) -> anyhow::Result<()> {
    let Some(url) = &settings.migrate_database_url else {
        // Nothing pending: nothing to run (the server's own role, which may not create
        // tables, serves a schema migrated by `tessera migrate` as the owner).
        if pending_migrations(db).await == Some(0) {
            return Ok(());
        }
        MIGRATOR.run(db).await.context("running database migrations")?;
        return Ok(());
    };
    let options: PgConnectOptions = url
        .expose_secret()
        .parse()
        .context("database.migrate_url (TESSERA_MIGRATE_DATABASE_URL): not a valid Postgres URL")?;
    let owner = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(with_session_settings(options))
        .await
        .with_context(|| {
            format!(
                "connecting to Postgres as the schema's owner at {}",
                crate::configuration::redact(url.expose_secret())
            )
        })?;
    let ran = MIGRATOR.run(&owner).await.context("running database migrations (as database.migrate_url's role)");
    owner.close().await;
    ran?;
    Ok(())
}

/// How many of this build's migrations the database has not applied (`None`: it has no
/// migration table, or it cannot be read).
async fn pending_migrations(db: &PgPool) -> Option<usize> {
    let applied: Vec<i64> =
        sqlx::query_scalar("select version from _sqlx_migrations where success").fetch_all(db).await.ok()?;
    Some(MIGRATOR.iter().filter(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version)).count())
}

/// Whether the server's own role may rewrite the audit trail (update, delete or truncate its
/// rows or signatures, or disable their triggers): true when it is, or may become, the
/// owner of the trail, its schema or its database, when it is a superuser, or may create
/// roles (and so grant itself the owner's), as in development with one role for everything.
pub async fn may_rewrite_audit(db: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "select (select bool_or(has_table_privilege(t, 'UPDATE') or has_table_privilege(t, 'DELETE')
                               or has_table_privilege(t, 'TRUNCATE') or has_table_privilege(t, 'TRIGGER'))
                   from unnest(array['public.audit', 'public.audit_mac', 'public.audit_checkpoint']) t)
                or pg_has_role((select tableowner from pg_tables where tablename = 'audit' and schemaname = 'public'), 'MEMBER')
                or pg_has_role((select nspowner from pg_namespace where nspname = 'public'), 'MEMBER')
                or pg_has_role((select datdba from pg_database where datname = current_database()), 'MEMBER')
                or (select rolsuper or rolcreaterole from pg_roles where rolname = current_user)",
    )
    .fetch_one(db)
    .await
}

/// The server version Postgres reports (`SHOW server_version`).
#[tracing::instrument(skip_all, err)]
pub async fn get_server_version(db: &PgPool) -> Result<String, sqlx::Error> {
    sqlx::query_scalar::<_, String>("show server_version").fetch_one(db).await
}

/// Waits for the session-level advisory lock named `name` (held until
/// [`advisory_unlock`] or the connection closes).
pub async fn advisory_lock(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_advisory_lock(hashtext($1))").bind(name).execute(conn).await?;
    Ok(())
}

/// Releases the advisory lock named `name`.
pub async fn advisory_unlock(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_advisory_unlock(hashtext($1))").bind(name).execute(conn).await?;
    Ok(())
}

/// Takes the session-level advisory lock `key` if it is free; whether it did.
pub async fn try_advisory_lock(conn: &mut PgConnection, key: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select pg_try_advisory_lock($1)").bind(key).fetch_one(conn).await
}

/// Rows a prune deletes at a time: no delete holds a long lock.
pub const PRUNE_BATCH: i64 = 5_000;

/// Runs `delete_sql` (a delete of at most `$2` rows older than `$1` days) until a batch
/// deletes fewer than a whole one; answers how many rows in all.
pub async fn delete_in_batches(db: &PgPool, delete_sql: &'static str, days: i32) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    loop {
        let done = sqlx::query(delete_sql).bind(days).bind(PRUNE_BATCH).execute(db).await?.rows_affected();
        deleted += done;
        if done < PRUNE_BATCH as u64 {
            return Ok(deleted);
        }
    }
}

/// How many rows a table holds (benchmarks size their data by it).
pub async fn count_rows(db: &PgPool, table: &'static str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(db).await
}

/// Drops a database (the benchmarks' own), closing its connections.
pub async fn drop_database(admin: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(r#"drop database if exists "{name}" with (force)"#)).execute(admin).await?;
    Ok(())
}

/// State names as a SQL list (`'running', 'paused'`), for a query whose partial index is
/// defined on those literals: a bound array would keep a generic plan from using the
/// index. The names are the enums' own identifiers (`RampState`, `ChangeState`), never
/// input.
pub(crate) fn sql_names(names: &[&'static str]) -> String {
    debug_assert!(names.iter().all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options_of(url: &str) -> String {
        let options: PgConnectOptions = url.parse().unwrap();
        with_session_settings(options).get_options().unwrap_or_default().to_owned()
    }

    #[test]
    fn every_session_asks_for_a_statement_timeout_an_idle_transaction_timeout_and_keepalives() {
        let options = options_of("postgres://u@127.0.0.1:5432/t");

        assert_eq!(
            options,
            "-c statement_timeout=30s -c idle_in_transaction_session_timeout=60s -c tcp_keepalives_idle=30 \
             -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
        );
    }

    #[test]
    fn a_setting_the_url_gives_is_kept_and_not_given_twice() {
        let options = options_of("postgres://u@127.0.0.1:5432/t?options=-c%20statement_timeout%3D5s");

        assert_eq!(
            options,
            "-c statement_timeout=5s -c idle_in_transaction_session_timeout=60s -c tcp_keepalives_idle=30 \
             -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
        );
    }
}
