//! The shared test harness: [`spawn_app`] starts the real server on a random port with its
//! own database and its own Redis key prefix, both removed when the [`TestApp`] is dropped;
//! [`spawn_app_sharing`] starts a second server on the same database and prefix (two
//! instances behind one load balancer); the [`TestApp`]'s request helpers send to it, each
//! request bounded by [`REQUEST_TIMEOUT`]; [`postgres_address`] is the target of a cuttable
//! [`testproxy::Proxy`] between an app and Postgres; [`browser`] drives headless Debian
//! Chromium.
//!
//! Tests talk to the real Postgres and Redis named by `DATABASE_URL` and `REDIS_URL`
//! (defaults: the local ones), never to mocks.

pub mod browser;
pub mod ui;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use server::configuration::Settings;
use server::startup::{Application, Signals};
use server::state::AppState;
use sqlx::Connection;

/// How long any request of a test to its app may take: a request that hangs fails its test
/// (naming the request) instead of stopping the run. A guard, not a performance claim.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A running server and what it owns.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`
    pub address: String,
    /// The port the server listens on.
    pub port: u16,
    /// The database created for this app (shared with the apps spawned by
    /// [`spawn_app_sharing`] from it).
    pub db_name: String,
    /// The Redis key prefix of this app (shared likewise).
    pub prefix: String,
    /// The server's shared state (database pool, Redis, metrics).
    pub state: AppState,
    /// The settings the server was built with.
    pub settings: Settings,
    /// An HTTP client for requests to the app; every request through it times out after
    /// [`REQUEST_TIMEOUT`].
    pub http: reqwest::Client,
    /// Stops this app's server when the test ends (declared before `_cleanup`: the server
    /// stops first).
    _server: StopServer,
    /// Removes the database and keys once the last app using them is dropped.
    _cleanup: Arc<Cleanup>,
}

/// Stops a server on drop.
struct StopServer(actix_web::dev::ServerHandle);

impl Drop for StopServer {
    fn drop(&mut self) {
        // Sends the stop command now; the returned future only waits for it.
        drop(self.0.stop(false));
    }
}

/// Removes what a test app created — its database, its Redis keys — on drop: also after a
/// failed assertion, and also when the app failed to build.
struct Cleanup {
    settings: Settings,
    /// The Postgres server's own database, reached directly (never through a test's proxy).
    admin_url: String,
    db_name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime: do the async cleanup on a thread of its own.
        let settings = self.settings.clone();
        let admin_url = self.admin_url.clone();
        let db_name = self.db_name.clone();
        let joined = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(cleanup(settings, admin_url, db_name));
        })
        .join();
        if joined.is_err() {
            eprintln!("test cleanup panicked");
        }
    }
}

/// The base settings every test app starts from: the environment's (so CI can point tests
/// elsewhere), with the site root of this workspace. Test apps serve the API open (the
/// development mode, `auth.open`), so tests of other things need no credentials; tests
/// of access control, and tests acting as a named actor, turn it off.
pub fn base_settings() -> Settings {
    let mut settings =
        Settings::from_toml_and_env("", |name| std::env::var(name).ok()).expect("test settings from the environment");
    settings.auth.open = true;
    if settings.audit_key.is_none() {
        settings.audit_key = Some(server::configuration::AuditKey::parse(TEST_AUDIT_KEY).expect("a valid key"));
    }
    if std::env::var_os("TESSERA_SITE_ROOT").is_none() {
        settings.site_root = workspace_root().join("target/site");
    }
    settings
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// Holds the leadership of jobs for as long as it lives, so that the app's scheduler
/// never runs them beside a test that runs them itself at hand-set instants.
pub struct HeldJobs(#[allow(dead_code)] sqlx::PgConnection);

/// Takes the leadership of `jobs` on the app's database (before its scheduler does).
pub async fn hold_jobs(app: &TestApp, jobs: &[&str]) -> HeldJobs {
    let mut conn = sqlx::PgConnection::connect_with(&app.state.db.connect_options()).await.expect("a connection");
    for job in jobs {
        let key = server::jobs::leader::lock_key(job);
        let taken: bool =
            sqlx::query_scalar("select pg_try_advisory_lock($1)").bind(key).fetch_one(&mut conn).await.expect("a lock");
        assert!(taken, "the test leads {job}: the app's scheduler took it first");
    }
    HeldJobs(conn)
}

/// The demo fleet (`tessera seed --demo`) written to `app`'s database and published to its
/// Redis (the outbox drained, every snapshot delivered): where most tests start. Answers
/// the seed's report (its users and their passwords).
pub async fn seed_demo(app: &TestApp) -> server::seed::SeedReport {
    let report = server::seed::demo_seed(&app.state.db).await.expect("the demo seed");
    let delivered = server::publish::drain_outbox(&app.state).await.expect("draining the outbox");
    assert!(delivered.failed.is_empty(), "the demo seed was not all published: {delivered:?}");
    report
}

/// Spawns the server with a fresh database and Redis prefix.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Spawns the server after `customise` adjusted its settings (e.g. a dead Redis URL).
pub async fn spawn_app_with(customise: impl FnOnce(&mut Settings)) -> TestApp {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let db_name = format!("tessera_test_{}", &id[..16]);
    let prefix = format!("test-{}", &id[..12]);
    let mut settings = base_settings();
    let admin_url = admin_url(&settings);
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.expect("connecting to Postgres as admin");
    sqlx::query(&format!(r#"create database "{db_name}""#))
        .execute(&mut admin)
        .await
        .expect("creating the test database");
    // As in production: the schema's owner migrates, the server serves as a member of
    // tessera_server, which may append to the audit trail but not rewrite it.
    ensure_server_role(&mut admin).await;
    admin.close().await.ok();
    let owner_url = with_database(settings.database_url.expose_secret(), &db_name);
    settings.database_url = SecretString::from(with_user(&owner_url, TEST_SERVER_ROLE));
    settings.migrate_database_url = Some(SecretString::from(owner_url));
    settings.redis_prefix = client::KeyPrefix::parse(&prefix).expect("valid test prefix");
    settings.bind = "127.0.0.1:0".parse().expect("loopback address");
    settings.workers = Some(1);
    customise(&mut settings);
    let cleanup = Arc::new(Cleanup { settings: settings.clone(), admin_url, db_name: db_name.clone() });
    start(settings, db_name, prefix, cleanup).await
}

/// Spawns a second server on `first`'s database and Redis prefix, as a second instance of
/// one deployment: both run migrations (a no-op the second time) and may run schedulers
/// side by side. The database and keys are removed only when both apps are dropped.
pub async fn spawn_app_sharing(first: &TestApp) -> TestApp {
    start(first.settings.clone(), first.db_name.clone(), first.prefix.clone(), first._cleanup.clone()).await
}

async fn start(mut settings: Settings, db_name: String, prefix: String, cleanup: Arc<Cleanup>) -> TestApp {
    // Each instance its own quota journal, as each process of a deployment has.
    let id = uuid::Uuid::new_v4().simple().to_string();
    settings.quota_journal = std::env::temp_dir().join(format!("tessera-test-journal-{}.log", &id[..16]));
    let application = Application::build(&settings, Signals::Ignore).await.expect("building the application");
    serve(application, settings, db_name, prefix, cleanup)
}

/// Restarts an app as the next process of the same instance: its HTTP server stops, its
/// state goes, and a new process starts on the same database, Redis prefix and quota
/// journal (once the stopped process has let the journal go).
pub async fn restart(app: TestApp) -> TestApp {
    app.stop_server().await;
    app.state.quotas.close_journal();
    let (settings, db_name, prefix, cleanup) =
        (app.settings.clone(), app.db_name.clone(), app.prefix.clone(), app._cleanup.clone());
    drop(app);
    let started = std::time::Instant::now();
    loop {
        match Application::build(&settings, Signals::Ignore).await {
            Ok(application) => return serve(application, settings, db_name, prefix, cleanup),
            // The stopped process's tasks let its journal go as they wind down.
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("restarting the application: {e:#}"),
        }
    }
}

fn serve(
    application: Application,
    settings: Settings,
    db_name: String,
    prefix: String,
    cleanup: Arc<Cleanup>,
) -> TestApp {
    let port = application.port();
    let state = application.state().clone();
    let server = StopServer(application.handle());
    tokio::spawn(application.run_until_stopped());

    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        port,
        db_name,
        prefix,
        state,
        settings,
        http: reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build().expect("an HTTP client"),
        _server: server,
        _cleanup: cleanup,
    }
}

/// Removes the done marker of `rid` (tenant `tenant`) from Redis, as the end of its
/// idempotency window does; fails the test when it was not there.
pub async fn forget_done_marker(app: &TestApp, tenant: &str, rid: &str) {
    let keys = &app.state.keys;
    let mut conn = app.state.redis.connection().await.expect("redis");
    let gen: String =
        redis::cmd("HGET").arg(keys.quota_state(tenant)).arg("gen").query_async(&mut conn).await.expect("gen");
    let mut removed = 0;
    let layouts: Vec<Option<i64>> = redis::cmd("HMGET")
        .arg(keys.quota_state(tenant))
        .arg(&client::Keys::QUOTA_MARKER_LAYOUTS[..])
        .query_async(&mut conn)
        .await
        .expect("the windows' layouts");
    for (start_field, buckets_field) in client::Keys::QUOTA_MARKER_WINDOWS {
        let (start, buckets): (Option<i64>, Option<u64>) = redis::cmd("HMGET")
            .arg(keys.quota_state(tenant))
            .arg(start_field)
            .arg(buckets_field)
            .query_async(&mut conn)
            .await
            .expect("the tenant's windows");
        let (Some(start), Some(buckets)) = (start, buckets) else { continue };
        let layout = client::keys::marker_layout(start, &layouts);
        for key in keys.quota_done_of(tenant, &gen, start, buckets, layout, rid) {
            removed += redis::cmd("HDEL").arg(key).arg(rid).query_async::<i64>(&mut conn).await.expect("HDEL");
        }
    }
    // Two when the request finished twice (expired, then settled late) across windows.
    assert!(removed >= 1, "{rid}'s marker was there");
}

/// Moves every usage-ledger row of `rid` `days` into the past (reserved, finished and its
/// deadline), as time passing would: past a tenant's retention, say.
pub async fn age_ledger_rows(app: &TestApp, rid: &str, days: i32) {
    sqlx::query(
        "update usage_ledger set reserved_at = reserved_at - make_interval(days => $2),
                at = at - make_interval(days => $2), deadline = deadline - make_interval(days => $2)
          where request_id = $1",
    )
    .bind(rid)
    .bind(days)
    .execute(&app.state.db)
    .await
    .expect("the ledger rows aged");
}

/// Requests to the app. `path` is everything after the address (`/api/v1/pools?x=1`, sent
/// as written, percent-escapes included); a body of `Value::Null` sends no body. Replies
/// are answered as status and JSON body, `Value::Null` when the body is not JSON.
impl TestApp {
    /// A request to `path`, for what the helpers below do not cover (headers, raw bodies).
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.address))
    }

    /// `GET path`, the response as it came.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        let request = self.request(reqwest::Method::GET, path);
        request.send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// `GET path` without credentials.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        json_reply(self.request(reqwest::Method::GET, path)).await
    }

    /// `POST path` with `body` and without credentials.
    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, None, body).await
    }

    /// `method path` with `body`, authorised by the bearer `token` if given.
    pub async fn send(&self, method: reqwest::Method, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut request = self.request(method, path);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        json_reply(with_json(request, &body)).await
    }

    /// Stops this app's HTTP server (graceful: requests in flight finish) and waits until
    /// it has; its database, keys and state stay.
    pub async fn stop_server(&self) {
        self._server.0.stop(true).await;
    }
}

/// `request` with `body` as JSON, or with no body when it is `Value::Null`.
pub fn with_json(request: reqwest::RequestBuilder, body: &Value) -> reqwest::RequestBuilder {
    if body.is_null() {
        request
    } else {
        request.json(body)
    }
}

/// Sends `request` and answers its status and JSON body (`Value::Null` when the body is not
/// JSON); a request that fails or times out panics, naming it.
pub async fn json_reply(request: reqwest::RequestBuilder) -> (u16, Value) {
    let (client, request) = request.build_split();
    let request = request.unwrap_or_else(|e| panic!("building a request: {e}"));
    let name = format!("{} {}", request.method(), request.url());
    let response = client.execute(request).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn cleanup(settings: Settings, admin_url: String, db_name: String) {
    if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
        let _ = sqlx::query(&format!(r#"drop database if exists "{db_name}" with (force)"#)).execute(&mut admin).await;
    }
    // The same Redis the apps use (one server or the cluster), every primary scanned.
    let timeouts = client::RedisTimeouts::default();
    if let Ok(target) = base_settings().redis_target(timeouts) {
        if let Ok(mut conn) = client::RedisHandle::on(target, timeouts).connection().await {
            let _ = conn.unlink_matching(&format!("{}:*", settings.redis_prefix)).await;
        }
    }
}

/// Points an app at the one Redis server at `url` (a dead port, a Redis of the test's
/// own), also when the suite runs on a cluster.
pub fn use_redis(settings: &mut Settings, url: &str) {
    settings.redis_url = SecretString::from(url.to_owned());
    settings.redis_cluster_nodes.clear();
    settings.redis_sentinel = None;
}

/// The same server as `settings.database_url`, database `postgres` (for creating and
/// dropping test databases).
pub fn admin_url(settings: &Settings) -> String {
    with_database(settings.database_url.expose_secret(), "postgres")
}

/// The `host:port` a Postgres URL points at (the target of a [`testproxy::Proxy`] in front
/// of it).
pub fn postgres_address(url: &str) -> String {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("a valid Postgres URL");
    format!("{}:{}", options.get_host(), options.get_port())
}

/// The login role test apps serve as: a member of `tessera_server` (the role migrations
/// grant to), as `scripts/run` and SECURITY.md set one up.
pub const TEST_SERVER_ROLE: &str = "tessera_test_server";

/// The audit key of test apps (unless the environment gives one): every row they write is
/// signed, as in production.
pub const TEST_AUDIT_KEY: &str = "test-audit-key-0123456789abcdef0123456789abcdef";

/// Creates `tessera_server` (as migration 0021 would) and [`TEST_SERVER_ROLE`] in it,
/// once per Postgres cluster, under a lock: tests start side by side.
async fn ensure_server_role(admin: &mut sqlx::PgConnection) {
    sqlx::query("select pg_advisory_lock(hashtext('tessera.test.roles'))").execute(&mut *admin).await.expect("lock");
    let created = sqlx::raw_sql(&format!(
        "do $$ begin
             if not exists (select from pg_roles where rolname = 'tessera_server') then
                 create role tessera_server nologin;
             end if;
             if not exists (select from pg_roles where rolname = '{TEST_SERVER_ROLE}') then
                 create role {TEST_SERVER_ROLE} login;
             end if;
         end $$;
         grant tessera_server to {TEST_SERVER_ROLE};"
    ))
    .execute(&mut *admin)
    .await;
    sqlx::query("select pg_advisory_unlock(hashtext('tessera.test.roles'))").execute(&mut *admin).await.ok();
    created.expect("creating the server's database roles");
}

/// `url` with its user replaced by `user` (no password: these machines trust loopback).
pub fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("database url has a scheme");
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}@{host}")
}

/// `url` with its database name replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("database url has a scheme");
    let (authority, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let query = tail.split_once('?').map(|(_, q)| format!("?{q}")).unwrap_or_default();
    format!("{scheme}://{authority}/{db}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_address_defaults_to_the_standard_port() {
        assert_eq!(postgres_address("postgres://u@db.internal/t1"), "db.internal:5432");
        assert_eq!(postgres_address("postgres://u:p@127.0.0.1:5433/t1?sslmode=disable"), "127.0.0.1:5433");
    }

    #[test]
    fn with_user_replaces_the_user_and_drops_the_password() {
        assert_eq!(with_user("postgres://u:p@127.0.0.1:5433/t1?x=1", "s"), "postgres://s@127.0.0.1:5433/t1?x=1");
        assert_eq!(with_user("postgres://127.0.0.1/t1", "s"), "postgres://s@127.0.0.1/t1");
    }
}
