//! Building the application: connections, migrations, the HTTP server with the Leptos app.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use actix_files::Files;
use actix_web::http::header;
use actix_web::middleware::from_fn;
use actix_web::{web, HttpRequest, HttpResponse, HttpServer};
use anyhow::Context;
use app::api::SharedBackend;
use leptos::prelude::*;
use leptos_actix::{
    generate_route_list, handle_server_fns_with_context, render_app_to_stream_with_context, LeptosRoutes,
};
use leptos_router::Method;

use crate::configuration::Settings;
use crate::error::ErrorBody;
use crate::metrics::Metrics;
use crate::state::AppState;

/// A built application: listening, migrated, not yet serving.
pub struct Application {
    port: u16,
    server: actix_web::dev::Server,
    state: AppState,
}

/// How the HTTP server treats process signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signals {
    /// Stop gracefully on SIGINT/SIGTERM (the `tessera serve` process).
    Handle,
    /// Leave signals alone (servers embedded in tests and benchmarks).
    Ignore,
}

impl Application {
    /// Checks that the UI bundle on disk comes from this build, connects to Postgres
    /// (required: migrations run now), prepares Redis (connected on first use, so the server
    /// starts while Redis is down), and binds the listener.
    pub async fn build(settings: &Settings, signals: Signals) -> anyhow::Result<Self> {
        check_bundle(&settings.site_root.join("pkg"))?;
        let state = build_state(settings).await?;
        let waiting = state.quotas.open_journal(&settings.quota_journal).with_context(|| {
            format!(
                "opening the quota journal quota.journal (TESSERA_QUOTA_JOURNAL) {}",
                settings.quota_journal.display()
            )
        })?;
        if waiting.operations > 0 {
            tracing::warn!(
                operations = waiting.operations,
                admitted_tokens = waiting.admitted_tokens,
                "quota operations from before the restart wait for redis"
            );
        }
        let listener = TcpListener::bind(settings.bind)
            .with_context(|| format!("binding http.bind (TESSERA_BIND) {}", settings.bind))?;
        let port = listener.local_addr()?.port();
        let server = http_server(settings, state.clone(), listener, signals)?;
        Ok(Self { port, server, state })
    }

    /// The port the server listens on (useful when bound to port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The shared state (for tests and jobs that run beside the server).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// A handle that stops the server.
    pub fn handle(&self) -> actix_web::dev::ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped; then gives back the tickets this instance holds in leases and
    /// the chunks of hot tenants' tokens it holds.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let served = self.server.await;
        match self.state.pools.return_leases().await {
            Ok(0) => {}
            Ok(returned) => tracing::info!(returned, "leased tickets returned at shutdown"),
            Err(e) => tracing::warn!(error = %e, "leased tickets could not be returned at shutdown"),
        }
        match self.state.quotas.return_chunks().await {
            Ok(r) if r.chunks == 0 => {}
            Ok(r) => tracing::info!(chunks = r.chunks, tokens = r.tokens, "quota chunks returned at shutdown"),
            Err(e) => {
                tracing::warn!(error = %e, "some quota chunks could not be returned at shutdown: they come back when their lease ends")
            }
        }
        served
    }
}

/// Installs the audit key and signs the history written before the first start with it;
/// warns when the trail can be rewritten unnoticed (no key, or a role that owns it).
async fn prepare_audit(settings: &Settings, db: &sqlx::PgPool) -> anyhow::Result<()> {
    match &settings.audit_key {
        Some(key) => {
            crate::audit::key::install(key)?;
            if crate::audit::store::unadopted_history(db).await.context("reading the audit signatures")? {
                tracing::warn!(
                    "audit rows written before TESSERA_AUDIT_KEY was set are not signed (verify reports them as \
                     unsigned): sign them with `tessera audit adopt --through <id> --hash <hex>`, naming the head you \
                     recorded outside the database before the key was set; without such a record, do not adopt"
                );
            }
        }
        None => {
            let mut conn = db.acquire().await.context("reading the audit signatures")?;
            anyhow::ensure!(
                !crate::audit::store::signed_history(&mut conn).await.context("reading the audit signatures")?,
                "TESSERA_AUDIT_KEY is not set, but the audit trail is signed: the rows this server would write \
                 could never be signed; set the key the trail is signed with"
            );
            tracing::warn!(
                "TESSERA_AUDIT_KEY is not set: audit rows are not signed, so a rewrite with recomputed hashes by \
                 someone with database rights would pass verification (SECURITY.md)"
            )
        }
    }
    if settings.audit_key.is_some() && settings.migrate_database_url.is_some() {
        tracing::warn!(
            "this process holds both TESSERA_AUDIT_KEY and the schema owner's URL (TESSERA_MIGRATE_DATABASE_URL): \
             whoever takes it over may rewrite audit rows and sign them; run `tessera migrate` as a step of its own \
             and serve without the owner's URL (SECURITY.md)"
        );
    }
    if crate::store::may_rewrite_audit(db).await.context("checking the server's database role")? {
        tracing::warn!(
            "the server's database role may rewrite the audit trail: serve as a member of tessera_server and \
             migrate through database.migrate_url (TESSERA_MIGRATE_DATABASE_URL; SECURITY.md)"
        );
    }
    Ok(())
}

/// Connects to Postgres (required: migrations run now) and prepares Redis (connected on
/// first use) and every shared service: the state the server, its jobs and the CLI share.
pub async fn build_state(settings: &Settings) -> anyhow::Result<AppState> {
    let db = crate::store::connect(settings).await?;
    crate::store::migrate(settings, &db).await?;
    prepare_audit(settings, &db).await?;
    let timeouts = client::RedisTimeouts::default();
    let redis = client::RedisHandle::on(settings.redis_target(timeouts)?, timeouts);
    let adopted =
        crate::adopt::store::adopt_snapshots(&db).await.context("adopting snapshots into the configuration tables")?;
    if !adopted.is_empty() {
        tracing::info!(?adopted, "configuration written before the configuration tables now has rows");
    }
    if let Some(admin) = &settings.admin {
        // The admin token's actor is a user: audit rows name it.
        crate::access::store::ensure_user(&db, &admin.actor, "admin")
            .await
            .context("recording the admin actor as a user")?;
    }
    let keys = client::Keys::new(settings.redis_prefix.clone());
    let metrics = Metrics::new();
    let quotas =
        client::Quotas::with_clock(redis.clone(), keys.clone(), client::Clock::Redis, Some(metrics.quota.clone()));
    let pools = client::Pools::new(
        redis.clone(),
        keys.clone(),
        client::Clock::Redis,
        settings.static_weights.clone(),
        Some(metrics.pool.clone()),
    );
    pools.set_ticket_leases(settings.ticket_leases);
    quotas.set_chunks(settings.quota_chunks.clone());
    let pool_admin = client::PoolAdmin::new(redis.clone(), keys.clone(), client::Clock::Redis);
    let routes = client::Routes::new(redis.clone(), keys.clone());
    let route_admin = client::RouteAdmin::new(redis.clone(), keys.clone());
    let outcomes =
        client::Outcomes::new(redis.clone(), keys.clone(), client::Clock::Redis, Some(metrics.outcomes.clone()));
    let auth_db = crate::store::connect_auth(settings)?;
    let ledger = db.clone();
    let earlier = crate::batch::Batcher::start(move |asked| {
        let db = ledger.clone();
        async move { crate::usage::store::earlier(&db, &asked).await.map_err(|e| e.to_string()) }
    });
    let state = AppState {
        db,
        auth_db,
        door: crate::throttle::Door::new(settings.door_burst),
        trusted_proxy_header: settings.trusted_proxy_header.clone(),
        redis,
        keys,
        metrics,
        quotas,
        pools,
        pool_admin,
        routes,
        route_admin,
        outcomes,
        admin: settings.admin.clone(),
        auth: settings.auth.clone(),
        sample_retention: settings.sample_retention,
        draw_log_retention: settings.draw_log_retention,
        recent_runs: Default::default(),
        ramps: settings.ramps.clone(),
        known: Default::default(),
        audit_verify: Default::default(),
        earlier,
    };
    let (pools, tenants) = crate::publish::remember_published(&state).await?;
    tracing::info!(pools, tenants, "last published snapshots loaded: the data plane degrades from its first request");
    Ok(state)
}

fn http_server(
    settings: &Settings,
    state: AppState,
    listener: TcpListener,
    signals: Signals,
) -> anyhow::Result<actix_web::dev::Server> {
    let site_root = settings.site_root.to_string_lossy().into_owned();
    let leptos_options = LeptosOptions::builder()
        .output_name(app::OUTPUT_NAME)
        .site_root(site_root.as_str())
        .site_pkg_dir("pkg")
        .site_addr(listener.local_addr()?)
        .build();
    let pkg_dir = settings.site_root.join("pkg");
    let backend: SharedBackend = Arc::new(crate::backend::UiBackend::new(state.clone()));
    let metrics = web::Data::new(state.metrics.clone());
    let data = web::Data::new(state);
    // API tokens verified recently: the guard and the token routes share one cache.
    let tokens = web::Data::new(crate::access::TokenCache::default());
    let mut server = HttpServer::new(move || {
        let routes = generate_route_list(app::App);
        let options = leptos_options.clone();
        let context = {
            let backend = backend.clone();
            move || provide_context(backend.clone())
        };
        actix_web::App::new()
            .app_data(data.clone())
            .app_data(tokens.clone())
            .app_data(metrics.clone())
            .app_data(web::PayloadConfig::new(crate::error::MAX_RAW_BODY))
            // Innermost: a raw body over its limit is answered as JSON, as every API error.
            .wrap(from_fn(crate::error::json_payload_errors))
            // Who may call which /api/v1 route (inner: runs after the request is logged and counted).
            .wrap(from_fn(crate::access::guard))
            .wrap(from_fn(crate::metrics::record))
            .wrap(tracing_actix_web::TracingLogger::default())
            // Outermost: every response (refusals and handler errors arrive as responses).
            .wrap(from_fn(crate::security_headers::security_headers))
            .app_data(web::JsonConfig::default().limit(8 * 1024 * 1024).error_handler(crate::error::json_error))
            .app_data(web::QueryConfig::default().error_handler(crate::error::query_error))
            .app_data(web::PathConfig::default().error_handler(crate::error::path_error))
            .configure(api_routes)
            // After every API route: an /api path or a documented path (a probe) that no route
            // took is a JSON 405 or 404, not the UI's page.
            .service(web::resource(not_routed_patterns()).to(not_routed))
            .route(
                &format!("{}/{{tail:.*}}", app::api::SERVER_FN_PREFIX),
                handle_server_fns_with_context(context.clone()),
            )
            .service(Files::new("/pkg", pkg_dir.clone()))
            .leptos_routes_with_context(routes, context.clone(), {
                let options = options.clone();
                move || app::shell(options.clone())
            })
            // Any other path renders the app too, whose router shows "Page not found" (404).
            .default_service(render_app_to_stream_with_context(
                context,
                {
                    let options = options.clone();
                    move || app::shell(options.clone())
                },
                Method::Get,
            ))
            .app_data(web::Data::new(options))
    })
    .listen(listener)?;
    if let Some(workers) = settings.workers {
        server = server.workers(workers);
    }
    if signals == Signals::Ignore {
        server = server.disable_signals();
    }
    Ok(server.run())
}

/// Every HTTP API route, resource by resource (the order matters only where two patterns
/// could match one path: the more specific first).
pub fn api_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(crate::probes::routes::healthz)
        .service(crate::probes::routes::readyz)
        .service(crate::probes::routes::readyz_details)
        .service(crate::probes::routes::metrics)
        .service(crate::openapi::get_openapi)
        .service(crate::openapi::get_reference)
        .service(crate::quota::routes::reserve_quota)
        .service(crate::quota::routes::settle_quota)
        .service(crate::quota::routes::release_quota)
        .service(crate::quota::routes::get_quota)
        .service(crate::pools::draw::draw_ticket)
        .service(crate::channels::outcomes::record_outcomes);
    crate::pools::routes::configure(cfg);
    crate::pools::history::routes::configure(cfg);
    crate::approvals::routes::configure(cfg);
    crate::gate::break_glass::routes::configure(cfg);
    crate::channels::routes::configure(cfg);
    crate::plans::routes::configure(cfg);
    crate::tenants::routes::configure(cfg);
    crate::usage::routes::configure(cfg);
    crate::usage::dead_letters::routes::configure(cfg);
    crate::health::routes::configure(cfg);
    crate::tiers::routes::configure(cfg);
    crate::draws::routes::configure(cfg);
    crate::ramps::routes::configure(cfg);
    crate::routing::routes::configure(cfg);
    crate::access::routes::configure(cfg);
    crate::access::account::configure(cfg);
    cfg.service(crate::audit::routes::verify)
        .service(crate::audit::routes::export)
        .service(crate::audit::routes::list)
        .service(crate::samples::routes::list_pool_samples);
}

/// Refuses to serve a UI bundle from another build than this server's (issue 14: a release
/// server serving a debug bundle panicked in hydration on every page). Both carry
/// [`app::BUILD_ID`]; the bundle's is read from its `.wasm` file. No bundle at all is only
/// a warning: the API and the server-rendered pages work without it.
fn check_bundle(pkg_dir: &Path) -> anyhow::Result<()> {
    // Tests start many servers on one site: read each unchanged bundle once per process.
    static VERIFIED: Mutex<Vec<(PathBuf, Option<SystemTime>, u64)>> = Mutex::new(Vec::new());
    let wasm_path = pkg_dir.join(format!("{}.wasm", app::OUTPUT_NAME));
    let Ok(metadata) = std::fs::metadata(&wasm_path) else {
        tracing::warn!(
            pkg = %pkg_dir.display(),
            "no wasm bundle found: pages render but will not hydrate (build it with scripts/build)"
        );
        return Ok(());
    };
    let stamp = (wasm_path.clone(), metadata.modified().ok(), metadata.len());
    let mut verified = VERIFIED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if verified.contains(&stamp) {
        return Ok(());
    }
    let wasm = std::fs::read(&wasm_path).with_context(|| format!("reading the UI bundle {}", wasm_path.display()))?;
    let rebuild = "build the server and the site together (scripts/build; scripts/run builds into target/site, \
                   scripts/test into target/site-test), or point http.site_root \
                   (TESSERA_SITE_ROOT) at the site built with this server";
    match app::bundle_build_id(&wasm) {
        Some(id) if id == app::BUILD_ID => {
            tracing::info!(build = app::BUILD_ID, pkg = %pkg_dir.display(), "UI bundle matches this build");
            verified.push(stamp);
            Ok(())
        }
        Some(id) => anyhow::bail!(
            "the UI bundle in {} is from build {id}, this server is build {}: its pages would fail to hydrate; \
             {rebuild}",
            pkg_dir.display(),
            app::BUILD_ID
        ),
        None => anyhow::bail!(
            "the UI bundle in {} carries no build id (built before build ids, or not by this project), this server \
             is build {}; {rebuild}",
            pkg_dir.display(),
            app::BUILD_ID
        ),
    }
}

/// The paths [`not_routed`] answers when no route took the request: all of `/api`, and
/// the documented paths outside it (`/healthz`, `/readyz`, `/metrics`).
fn not_routed_patterns() -> Vec<String> {
    let documented = crate::openapi::document().paths.paths.into_keys().filter(|path| !path.starts_with("/api/"));
    ["/api".to_owned(), "/api/{tail:.*}".to_owned()].into_iter().chain(documented).collect()
}

/// The answer to an API request that no route took: 405 with `Allow` when the OpenAPI
/// document has the path with other methods, else 404; JSON either way, as every API error.
async fn not_routed(req: HttpRequest) -> HttpResponse {
    let path = req.path();
    let allowed = documented_methods(path);
    if allowed.is_empty() {
        return HttpResponse::NotFound().json(ErrorBody::message(format!("no API route {path}")));
    }
    let allowed = allowed.join(", ");
    HttpResponse::MethodNotAllowed()
        .insert_header((header::ALLOW, allowed.as_str()))
        .json(ErrorBody::message(format!("{} is not allowed on {path}; allowed: {allowed}", req.method())))
}

/// The methods the OpenAPI document gives the path template that `path` fills in, if any.
fn documented_methods(path: &str) -> Vec<&'static str> {
    /// Each documented path template, split into segments, with its methods.
    static TEMPLATES: LazyLock<Vec<(Vec<String>, Vec<&'static str>)>> = LazyLock::new(|| {
        crate::openapi::document()
            .paths
            .paths
            .iter()
            .map(|(template, item)| {
                let methods = [
                    ("GET", item.get.is_some()),
                    ("HEAD", item.head.is_some()),
                    ("POST", item.post.is_some()),
                    ("PUT", item.put.is_some()),
                    ("PATCH", item.patch.is_some()),
                    ("DELETE", item.delete.is_some()),
                    ("OPTIONS", item.options.is_some()),
                    ("TRACE", item.trace.is_some()),
                ];
                let methods =
                    methods.into_iter().filter(|(_, present)| *present).map(|(method, _)| method).collect::<Vec<_>>();
                (template.split('/').map(str::to_owned).collect(), methods)
            })
            .collect()
    });
    let segments: Vec<&str> = path.split('/').collect();
    let fills = |template: &[String]| {
        template.len() == segments.len()
            && template.iter().zip(&segments).all(|(want, got)| {
                if want.starts_with('{') && want.ends_with('}') {
                    !got.is_empty()
                } else {
                    want == got
                }
            })
    };
    let mut methods: Vec<&'static str> = TEMPLATES
        .iter()
        .filter(|(template, _)| fills(template))
        .flat_map(|(_, methods)| methods.iter().copied())
        .collect();
    methods.sort_unstable();
    methods.dedup();
    methods
}

#[cfg(test)]
mod tests {
    use super::documented_methods;

    #[test]
    fn a_documented_path_has_its_methods_and_an_unknown_one_none() {
        assert_eq!(documented_methods("/api/v1/pools/cn-pay/draw"), ["POST"]);
        assert_eq!(documented_methods("/api/v1/no-such-thing"), Vec::<&str>::new());
        assert_eq!(documented_methods("/api/v1/pools//draw"), Vec::<&str>::new());
        assert_eq!(documented_methods("/healthz"), ["GET"]);
    }
}
