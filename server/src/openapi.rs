//! The OpenAPI 3 document of the HTTP API ([`ApiDoc`]), served at `GET /api/v1/openapi.json`.
//!
//! Each handler carries `#[utoipa::path(...)]` *above* its actix route attribute (utoipa
//! reads the method and the path from `#[get("...")]`, the path parameters from
//! `web::Path`, the request body from `web::Json<T>`), and is listed in [`ApiDoc`]'s
//! `paths(...)` below. `tests/tests/openapi.rs` fails for every route in
//! `server/src/routes/` that the document lacks, and for every documented path that no
//! route serves.
//!
//! Schemas: request bodies defined here derive `utoipa::ToSchema`; the `client` types the
//! API answers with derive it behind `client`'s `utoipa` feature; `engine` stays free of
//! utoipa (it compiles to wasm), so its types are described by hand ([`WeightEntry`]) or as
//! `#[schema(value_type = Object)]`.

use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi};

use client::pool::PoolName;
use client::quota::TenantId;

use crate::error::{ConflictBody, ErrorBody, QuotaRefusedBody};
use crate::routes;

/// The name of the admin bearer-token security scheme: admin handlers declare
/// `security(("admin_token" = []), ("session_cookie" = []))` (either one).
pub const ADMIN_TOKEN: &str = "admin_token";
/// The name of the login-session security scheme (the cookie `POST /api/v1/auth/login` sets).
pub const SESSION_COOKIE: &str = "session_cookie";

/// The whole HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tessera",
        description = "Weighted traffic allocation and tenant quota reservation: the data plane \
            (draw a channel; reserve, settle, release tokens), the admin API and the audit trail. \
            Errors answer `{\"error\": ...}`, with `field` and `rule` for a 400 or a 422.",
    ),
    paths(
        // Probes and this document.
        routes::health::healthz,
        routes::health::readyz,
        routes::metrics::metrics,
        routes::openapi::get_openapi,
        // Quota data plane.
        routes::quota::reserve_quota,
        routes::quota::settle_quota,
        routes::quota::release_quota,
        routes::quota::get_quota,
        // Pool data plane.
        routes::pool::draw_ticket,
        routes::samples::list_pool_samples,
        // Outcome reports (data plane of health).
        routes::outcomes::record_outcomes,
        // Audit trail.
        routes::audit::list,
        routes::audit::verify,
        routes::audit::export,
        // ==== ADMIN: every admin handler goes here (routes/admin.rs and any new admin files) ====
        // Annotate it `#[utoipa::path(tag = "admin", security(("admin_token" = []), ("session_cookie" = [])), ...)]`
        // above its `#[get/post/put/delete(...)]`, then list it, e.g. `routes::admin::get_pool,`.
        // Pools (routes/admin.rs).
        routes::admin::list_pools,
        routes::admin::get_pool,
        routes::admin::put_pool,
        routes::admin::update_pool_weights,
        routes::admin::add_member,
        routes::admin::eject_member,
        routes::admin::restore_member,
        routes::admin::put_peak_windows,
        routes::admin::put_caps,
        routes::admin::rebuild_pool,
        // Channels, plans, tenants and grants (routes/config.rs).
        routes::config::list_channels,
        routes::config::get_channel,
        routes::config::create_channel,
        routes::config::update_channel,
        routes::config::disable_channel,
        routes::config::enable_channel,
        routes::config::list_plans,
        routes::config::get_plan,
        routes::config::create_plan,
        routes::config::update_plan,
        routes::config::list_tenants,
        routes::config::get_tenant,
        routes::config::put_tenant,
        routes::config::add_grant,
        routes::config::revoke_grant,
        // Health state, pins and policies (routes/channel_health.rs).
        routes::channel_health::pool_health,
        routes::channel_health::channel_health,
        routes::channel_health::history,
        routes::channel_health::pin,
        routes::channel_health::unpin,
        routes::channel_health::put_policy,
        // Sign-in, users and API tokens (routes/auth.rs).
        routes::auth::login,
        routes::auth::logout,
        routes::auth::me,
        routes::auth::list_users,
        routes::auth::add_user,
        routes::auth::set_role,
        routes::auth::disable_user,
        routes::auth::unlock_user,
        routes::auth::list_tokens,
        routes::auth::add_token,
        routes::auth::revoke_token,
        // ==== end of ADMIN ====
    ),
    // Schemas that only path parameters name (utoipa collects those of bodies on its own), and
    // those the admin handlers share.
    components(schemas(
        TenantId, PoolName, ErrorBody, QuotaRefusedBody, ConflictBody, ConflictOrDuplicateBody, WeightEntry,
        PeakWindowEntry, Tier, ReweightMode, Pin, GrantKind, Role, TokenScope, TenantSettings,
    )),
    modifiers(&AdminToken, &SessionCookie, &ServerErrors),
    tags(
        (name = "quota", description = "Two-phase token quota: reserve an estimate, settle the real use or release; idempotent by request id"),
        (name = "pool", description = "Weighted ticket pools: draw the channel for a request; samples for charts"),
        (name = "health", description = "Outcome reports per channel, which decay, eject and recover channels; health state, pins and policies"),
        (name = "admin", description = "Pools, channels, plans, tenants and their changes; every write is audited (bearer token or login session)"),
        (name = "auth", description = "Sign-in and sign-out, who am I; users and API tokens (admins)"),
        (name = "audit", description = "The append-only, hash-chained audit log"),
        (name = "probes", description = "Liveness, readiness, Prometheus metrics"),
        (name = "meta", description = "This document"),
    )
)]
pub struct ApiDoc;

/// The document as served.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// One member of a pool's weights as the admin API takes and gives them:
/// `[{"member": "A", "weight": 45}, …]`, members unique and non-empty, at least one weight
/// positive, the total at most 2^53 − 1. Describes `engine::Weights` (which stays free of
/// utoipa): `#[schema(value_type = Vec<crate::openapi::WeightEntry>)]`.
#[derive(utoipa::ToSchema)]
pub struct WeightEntry {
    /// The member (a channel code, or a tier `G`/`N`/`U` in a `tiers` pool).
    pub member: String,
    /// Its integer weight, ≥ 0 (0: never drawn).
    pub weight: u64,
}

/// One daily peak window of a pool, in the pool's timezone: `[start, end)` (crossing midnight
/// when `start` is after `end`). Describes `engine::peak::PeakWindow`.
#[derive(utoipa::ToSchema)]
pub struct PeakWindowEntry {
    /// Local start time, `HH:MM` (or `HH:MM:SS`), inclusive.
    #[schema(example = "19:00")]
    pub start: String,
    /// Local end time, `HH:MM` (or `HH:MM:SS`), exclusive; not equal to `start`.
    #[schema(example = "23:00")]
    pub end: String,
    /// Batch size multiplier during the window, 1..=1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub multiplier: u32,
    /// Weights used instead of the pool's during the window; they name only the pool's own
    /// members (a tiers pool's tiers).
    pub weights: Option<Vec<WeightEntry>>,
}

/// A traffic tier: good, normal, unqualified. Describes `engine::Tier`.
#[derive(utoipa::ToSchema)]
pub enum Tier {
    G,
    N,
    U,
}

/// How a weight change reaches the tickets already in the pool: `drain` lets them be drawn
/// and uses the new weights from the next batch; `immediate` replaces them at once.
/// Describes `client::pool::ReweightMode`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ReweightMode {
    Drain,
    Immediate,
}

/// An operator's override of health evaluation: `healthy` (full weight whatever the
/// outcomes) or `ejected`. Describes `engine::health::Pin`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Pin {
    Healthy,
    Ejected,
}

/// A grant's kind: `temporary` tokens pay after every bonus, soonest expiry first; `bonus`
/// tokens pay first, lower `priority` first.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum GrantKind {
    Temporary,
    Bonus,
}

/// What a person may do: `viewer` reads; `operator` also ejects, restores, pins and
/// rebuilds; `pm` also edits configuration; `auditor` reads and exports the audit trail;
/// `admin` does all of that and manages users and tokens. Describes `auth::Role`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Pm,
    Auditor,
    Admin,
}

/// An API token's scope: `dataplane` (draws, quota operations, outcome reports) or `admin`
/// (reads, operations and edits of the admin API; not users and tokens). Describes
/// `auth::Scope`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TokenScope {
    Dataplane,
    Admin,
}

/// The body of `PUT /api/v1/tenants/{tenant}`: the tenant's plan and settings, and the
/// bookkeeping of the change. Any other field is refused (400 naming it).
#[derive(utoipa::ToSchema)]
pub struct TenantSettings {
    /// The tenant's plan (an existing plan's name: 422 otherwise).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub plan: String,
    /// How long a reservation stays open before the sweeper returns it, 1..=86400000 ms
    /// (default 600000).
    #[schema(minimum = 1, maximum = 86400000)]
    pub reservation_ttl_ms: Option<i64>,
    /// Days a period's counters are kept after it ends, 1..=3660 (default 62).
    #[schema(minimum = 1, maximum = 3660)]
    pub retention_days: Option<i64>,
    /// What clients do while Redis is unreachable: `{"policy": "fail_closed"}` (the
    /// default) or `{"policy": "fail_open_limited", "allowance": <tokens>}`.
    #[schema(value_type = Option<Object>)]
    pub fallback: Option<serde_json::Value>,
    /// The tenant's version this change was made against: 0 to create.
    #[schema(minimum = 0)]
    pub expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// The body of a 409 that is either a version conflict (`ConflictBody`) or a duplicate
/// identity (`ErrorBody` naming the field and the rule).
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum ConflictOrDuplicateBody {
    Conflict(ConflictBody),
    Duplicate(ErrorBody),
}

/// Declares the admin bearer token (`Authorization: Bearer <admin.token>`).
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "The configured admin token (admin.token, TESSERA_ADMIN_TOKEN), or an API token \
             (POST /api/v1/tokens) whose scope allows the route"
                .to_owned(),
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(ADMIN_TOKEN, SecurityScheme::Http(scheme));
    }
}

/// Declares the login session: the cookie `POST /api/v1/auth/login` sets.
struct SessionCookie;

impl Modify for SessionCookie {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = ApiKey::Cookie(ApiKeyValue::with_description(
            crate::auth::SESSION_COOKIE,
            "The session cookie POST /api/v1/auth/login sets; what it may do follows the user's role. \
             Unsafe requests (POST, PUT, …) made with it must come from this site (Origin or Referer) \
             and repeat the session's CSRF token in X-CSRF-Token",
        ));
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(SESSION_COOKIE, SecurityScheme::ApiKey(scheme));
    }
}

/// Adds the 500 that every handler answering `ApiError` may give (an unexpected error, with
/// no internals in its body) to each operation that documents an [`ErrorBody`] answer.
struct ServerErrors;

impl Modify for ServerErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                let answers_api_errors = serde_json::to_string(&*responses)
                    .is_ok_and(|json| json.contains("\"#/components/schemas/ErrorBody\""));
                if answers_api_errors && !responses.contains_key("500") {
                    let response = ResponseBuilder::new()
                        .description("An unexpected error; the server log has the details")
                        .content(
                            "application/json",
                            ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                        )
                        .build();
                    responses.insert("500".to_owned(), RefOr::T(response));
                }
            }
        }
    }
}
