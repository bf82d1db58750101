//! The admin API for channels, plans, tenants and grants. Reads need permission `read`,
//! writes `edit` or `operate` (see `crate::auth::requirement`). Writes are audited and
//! publish what they change (pools holding a channel, tenants on a plan) at once, or
//! through the outbox when Redis is away.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use client::pool::{PoolName, ReweightMode};
use client::quota::{GrantId, GrantKind, TenantId, Tokens};
use engine::Tier;
use serde::Deserialize;
use serde_json::json;

use super::admin::{actor, change_error, expected, malformed, publish_now, rebuild_published_if_needed, written_json};
use crate::db::config::{
    self, ChannelCode, ChannelSpec, DisplayName, NewGrant, PlanName, PlanSpec, TenantSpec, Weight,
};
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::routes::audit::db_error;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_channels)
        .service(create_channel)
        .service(get_channel)
        .service(update_channel)
        .service(disable_channel)
        .service(enable_channel)
        .service(list_plans)
        .service(create_plan)
        .service(get_plan)
        .service(update_plan)
        .service(list_tenants)
        .service(get_tenant)
        .service(put_tenant)
        .service(add_grant)
        .service(revoke_grant);
}

// --- channels ----------------------------------------------------------------------------

/// `GET /api/v1/channels` → every channel with the pools that hold it.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "`{\"channels\": [Channel]}`, by code: each with the pools that hold it", body = Object),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/channels")]
pub async fn list_channels(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let channels = config::list_channels(&state.db).await.map_err(db_error)?;
    Ok(HttpResponse::Ok().json(json!({ "channels": channels })))
}

/// `GET /api/v1/channels/{code}` → the channel, or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`")),
    responses(
        (status = 200, description = "The channel, with the pools that hold it", body = crate::db::config::Channel),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 422, description = "A malformed channel code (naming `code`)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/channels/{code}")]
pub async fn get_channel(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    match config::get_channel(&state.db, &code).await.map_err(db_error)? {
        Some(channel) => Ok(HttpResponse::Ok().json(channel)),
        None => Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str()))),
    }
}

/// A channel to register.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewChannelBody {
    /// The code tickets carry: 1..=64 of `[A-Za-z0-9_.-]`.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    code: ChannelCode,
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    #[schema(value_type = String, max_length = 200)]
    name: DisplayName,
    /// The tier it serves in `tiers` pools, if any.
    #[serde(default)]
    #[schema(value_type = Option<crate::openapi::Tier>)]
    tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one, 0..=2^53−1.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    base_weight: Weight,
    /// Whether pools draw it (default true).
    #[serde(default = "yes")]
    #[schema(default = true)]
    enabled: bool,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    reason: Option<String>,
}

fn yes() -> bool {
    true
}

/// `POST /api/v1/channels` with `{"code", "name", "tier"?, "base_weight", "enabled"?,
/// "reason"?}` → 201 and the channel; 409 when the code is taken.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Registered: `{\"channel\": Channel, \"audit_id\", \"version\"}`", body = Object),
        (status = 400, description = "A malformed body, naming the field (code, name, tier, base_weight in 0..=2^53−1, reason)", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 409, description = "The code is taken: a version conflict with `expected_version` 0 and the channel's `current_version`", body = ConflictBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels")]
pub async fn create_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<NewChannelBody>,
) -> Result<HttpResponse, ApiError> {
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let spec = ChannelSpec { name: body.name, tier: body.tier, base_weight: body.base_weight };
    let (written, channel) =
        config::create_channel(&state.db, &who.ctx(), &body.code, &spec, body.enabled).await.map_err(change_error)?;
    Ok(HttpResponse::Created()
        .json(json!({"channel": channel, "audit_id": written.audit_id, "version": written.version})))
}

/// A channel's new name, tier and base weight.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    #[schema(value_type = String, max_length = 200)]
    name: DisplayName,
    /// The tier it serves in `tiers` pools; left out: none.
    #[serde(default)]
    #[schema(value_type = Option<crate::openapi::Tier>)]
    tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one, 0..=2^53−1.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    base_weight: Weight,
    /// The channel's version this change was made against.
    #[schema(minimum = 0)]
    expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    reason: Option<String>,
}

/// `PUT /api/v1/channels/{code}` with `{"name", "tier"?, "base_weight",
/// "expected_version", "reason"?}`.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`")),
    responses(
        (status = 200, description = "Changed: `{\"channel\": Channel, \"audit_id\", \"version\"}`", body = Object),
        (status = 400, description = "A malformed body, naming the field, or a negative `expected_version`", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "A malformed channel code in the path, or a tier the channel does not serve in a tiers pool that holds it", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[put("/api/v1/channels/{code}")]
pub async fn update_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ChannelBody>,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let spec = ChannelSpec { name: body.name, tier: body.tier, base_weight: body.base_weight };
    let (written, channel) =
        config::update_channel(&state.db, &who.ctx(), &code, &spec, expected(body.expected_version)?)
            .await
            .map_err(change_error)?;
    Ok(HttpResponse::Ok().json(json!({"channel": channel, "audit_id": written.audit_id, "version": written.version})))
}

/// An enable or disable.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = String, max_length = 500)]
    reason: Option<String>,
    /// The channel's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    expected_version: Option<i64>,
}

async fn switch_channel(
    req: HttpRequest,
    state: &AppState,
    code: &str,
    body: SwitchBody,
    enabled: bool,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(code).map_err(malformed)?;
    let who = actor(&req, state, &body.reason, true)?;
    let expected_version = body.expected_version.map(expected).transpose()?;
    let (written, channel) = config::set_channel_enabled(&state.db, &who.ctx(), &code, enabled, expected_version)
        .await
        .map_err(change_error)?;
    let published = publish_now(state).await;
    // A pool whose ejected members now hold more than its limit is rebuilt without them.
    let mut rebuilt = Vec::new();
    if published && !enabled {
        for pool in &channel.pools {
            let Ok(name) = PoolName::parse(pool) else { continue };
            if rebuild_published_if_needed(state, &name, ReweightMode::Drain).await {
                rebuilt.push(pool.clone());
            }
        }
    }
    let mut reply = written_json(&written, published);
    reply["channel"] = json!(channel);
    reply["rebuilt"] = json!(rebuilt);
    Ok(HttpResponse::Ok().json(reply))
}

/// `POST /api/v1/channels/{code}/disable` with `{"reason", "expected_version"?}`: the
/// channel is ejected from every pool that holds it (each pool republished, audited).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`")),
    responses(
        (status = 200, description = "Changed, and every pool holding the channel republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id), \"channel\": Channel, \"rebuilt\": [pools rebuilt at once]}`", body = Object),
        (status = 400, description = "A malformed body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role operator or admin, an admin-scope API token or the configured admin token (permission operate); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "A malformed channel code in the path, or the channel is already disabled", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/disable")]
pub async fn disable_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SwitchBody>,
) -> Result<HttpResponse, ApiError> {
    switch_channel(req, &state, &path, body.into_inner(), false).await
}

/// `POST /api/v1/channels/{code}/enable` with `{"reason", "expected_version"?}`: drawn
/// again in every pool that holds it (unless a pool ejected it on its own).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`")),
    responses(
        (status = 200, description = "Changed, and every pool holding the channel republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id), \"channel\": Channel, \"rebuilt\": [pools rebuilt at once]}`", body = Object),
        (status = 400, description = "A malformed body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role operator or admin, an admin-scope API token or the configured admin token (permission operate); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "A malformed channel code in the path, or the channel is already enabled", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/enable")]
pub async fn enable_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SwitchBody>,
) -> Result<HttpResponse, ApiError> {
    switch_channel(req, &state, &path, body.into_inner(), true).await
}

// --- plans -------------------------------------------------------------------------------

/// `GET /api/v1/plans` → every plan with how many tenants it has.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "`{\"plans\": [Plan]}`, by name: each with how many tenants it has", body = Object),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/plans")]
pub async fn list_plans(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let plans = config::list_plans(&state.db).await.map_err(db_error)?;
    Ok(HttpResponse::Ok().json(json!({ "plans": plans })))
}

/// `GET /api/v1/plans/{plan}` → the plan, or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The plan", body = crate::db::config::Plan),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 422, description = "A malformed plan name (naming `plan`)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/plans/{plan}")]
pub async fn get_plan(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = PlanName::parse(&path).map_err(malformed)?;
    match config::get_plan(&state.db, &name).await.map_err(db_error)? {
        Some(plan) => Ok(HttpResponse::Ok().json(plan)),
        None => Err(ApiError::NotFound(format!("unknown plan {:?}", name.as_str()))),
    }
}

/// A plan to create or change: the limits, and the bookkeeping of the change.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanBody {
    /// The plan's name, 1..=64 of `[A-Za-z0-9_-]`: required to create; when changing, the
    /// path's name or left out (a plan cannot be renamed).
    #[schema(value_type = Option<String>, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    name: Option<PlanName>,
    /// Tokens per UTC calendar month, 0..=2^53−1.
    /// Each limit is parsed on its own, so an error names its field.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    monthly_tokens: serde_json::Value,
    /// Requests per UTC day, 0..=2^53−1.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    daily_requests: serde_json::Value,
    /// Reservations open at once, 0..=2^31−1.
    #[schema(value_type = u32, maximum = 2147483647)]
    concurrency: serde_json::Value,
    /// Creating: must be left out. Changing: required, the plan's version this change was
    /// made against.
    #[schema(minimum = 0)]
    expected_version: Option<i64>,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    reason: Option<String>,
}

impl PlanBody {
    fn spec(&self) -> Result<PlanSpec, ApiError> {
        serde_json::from_value(json!({
            "monthly_tokens": self.monthly_tokens, "daily_requests": self.daily_requests, "concurrency": self.concurrency,
        }))
        .map_err(|e| ApiError::from_serde_message(&e.to_string()))
    }
}

/// `POST /api/v1/plans` with `{"name", "monthly_tokens", "daily_requests", "concurrency",
/// "reason"?}` → 201; 409 when the name is taken.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Created: `{\"plan\": Plan, \"audit_id\", \"version\"}`", body = Object),
        (status = 400, description = "A malformed body, naming the field: a missing `name`, an `expected_version` given, a limit out of range", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 409, description = "The name is taken: a version conflict with `expected_version` 0 and the plan's `current_version`", body = ConflictBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/plans")]
pub async fn create_plan(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<PlanBody>,
) -> Result<HttpResponse, ApiError> {
    let who = actor(&req, &state, &body.reason, false)?;
    let name = body.name.clone().ok_or_else(|| ApiError::bad_request("name", "is required"))?;
    if body.expected_version.is_some() {
        return Err(ApiError::bad_request("expected_version", "a new plan has no version; leave it out"));
    }
    let spec = body.spec()?;
    let (written, plan) = config::create_plan(&state.db, &who.ctx(), &name, &spec).await.map_err(change_error)?;
    Ok(HttpResponse::Created().json(json!({"plan": plan, "audit_id": written.audit_id, "version": written.version})))
}

/// `PUT /api/v1/plans/{plan}` with `{"monthly_tokens", "daily_requests", "concurrency",
/// "expected_version", "reason"?}`: every tenant on the plan is republished.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed, and every tenant on the plan republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id), \"plan\": Plan}`", body = Object),
        (status = 400, description = "A malformed body, naming the field: a `name` other than the path's, a missing or negative `expected_version`, a limit out of range", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 409, description = "The plan is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "A malformed plan name in the path (naming `plan`)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[put("/api/v1/plans/{plan}")]
pub async fn update_plan(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PlanBody>,
) -> Result<HttpResponse, ApiError> {
    let name = PlanName::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, false)?;
    if body.name.as_ref().is_some_and(|n| n != &name) {
        return Err(ApiError::bad_request("name", "a plan cannot be renamed"));
    }
    let expected_version =
        expected(body.expected_version.ok_or_else(|| ApiError::bad_request("expected_version", "is required"))?)?;
    let spec = body.spec()?;
    let (written, plan) =
        config::update_plan(&state.db, &who.ctx(), &name, &spec, expected_version).await.map_err(change_error)?;
    let published = publish_now(&state).await;
    let mut reply = written_json(&written, published);
    reply["plan"] = json!(plan);
    Ok(HttpResponse::Ok().json(reply))
}

// --- tenants -----------------------------------------------------------------------------

fn tenant_id(raw: &str) -> Result<TenantId, ApiError> {
    Ok(TenantId::parse(raw)?)
}

/// `GET /api/v1/tenants` → every tenant: name, plan, version, live grants.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "`{\"tenants\": [{\"name\", \"plan\", \"version\", \"updated_at\", \"live_grants\"}]}`, by name", body = Object),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants")]
pub async fn list_tenants(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let tenants = config::list_tenants(&state.db).await.map_err(db_error)?;
    Ok(HttpResponse::Ok().json(json!({ "tenants": tenants })))
}

/// `GET /api/v1/tenants/{tenant}` → plan, settings, every grant (revoked ones marked), the
/// version and the published snapshot; or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The tenant: settings, every grant (revoked ones with `revoked_at`), the version and the published snapshot", body = crate::db::config::Tenant),
        (status = 400, description = "A malformed tenant name", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: reading needs a session (any role), an admin-scope API token or the configured admin token (permission read)", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants/{tenant}")]
pub async fn get_tenant(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    match config::get_tenant(&state.db, &tenant).await.map_err(db_error)? {
        Some(t) => Ok(HttpResponse::Ok().json(t)),
        None => Err(ApiError::NotFound(format!("unknown tenant {:?}", tenant.as_str()))),
    }
}

/// A tenant's plan and settings.
#[derive(Debug, Deserialize)]
pub struct TenantBody {
    #[serde(flatten)]
    spec: serde_json::Map<String, serde_json::Value>,
}

/// `PUT /api/v1/tenants/{tenant}` with `{"plan", "reservation_ttl_ms"?, "retention_days"?,
/// "fallback"?, "expected_version", "reason"?}`: creates (expected 0) or changes the
/// tenant; its quota is republished.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    request_body(content = crate::openapi::TenantSettings, description = "The tenant's plan and settings; fields left out take the defaults"),
    responses(
        (status = 200, description = "Created or changed, and its quota republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id)}`", body = Object),
        (status = 400, description = "A malformed tenant name or body, naming the field: an unknown field, a missing `expected_version`, a `reason` that is not a string", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version` (0: it exists already)", body = ConflictBody),
        (status = 422, description = "An unknown plan, or a setting out of range (`reservation_ttl_ms`, `retention_days`)", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[put("/api/v1/tenants/{tenant}")]
pub async fn put_tenant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<TenantBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let mut fields = body.into_inner().spec;
    let reason_raw = match fields.remove("reason") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(_) => return Err(ApiError::bad_request("reason", "must be a string")),
    };
    let who = actor(&req, &state, &reason_raw, false)?;
    let expected_version = match fields.remove("expected_version") {
        Some(v) => {
            expected(v.as_i64().ok_or_else(|| ApiError::bad_request("expected_version", "must be an integer"))?)?
        }
        None => return Err(ApiError::bad_request("expected_version", "is required (0 to create)")),
    };
    const KNOWN: [&str; 4] = ["plan", "reservation_ttl_ms", "retention_days", "fallback"];
    if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            unknown.clone(),
            format!("unknown field; expected one of {KNOWN:?}, expected_version, reason"),
        ));
    }
    let spec: TenantSpec = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| ApiError::from_serde_message(&e.to_string()))?;
    let written =
        config::put_tenant(&state.db, &who.ctx(), &tenant, &spec, expected_version).await.map_err(change_error)?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(written_json(&[written], published)))
}

/// A grant to add.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    /// The grant's id, unique for the tenant forever: 1..=64 of `[A-Za-z0-9_-]`, not `plan`.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    id: GrantId,
    /// `temporary` or `bonus`.
    #[schema(value_type = crate::openapi::GrantKind)]
    kind: String,
    /// Bonus grants only: lower pays first (default 0).
    #[schema(maximum = 2147483647)]
    priority: Option<u32>,
    /// Tokens granted, 1..=2^53−1.
    #[schema(value_type = u64, minimum = 1, maximum = 9007199254740991_u64)]
    amount: serde_json::Number,
    /// When the grant starts paying (default: at once).
    starts_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it stops (default: never); after `starts_at` and after now.
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    expected_version: Option<i64>,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(max_length = 500)]
    reason: Option<String>,
}

/// `POST /api/v1/tenants/{tenant}/grants` with `{"id", "kind": "temporary"|"bonus",
/// "priority"?, "amount", "starts_at"?, "expires_at"?, "reason"?, "expected_version"?}` →
/// 201; 409 when the id was ever used; 422 for a grant that has already expired.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 201, description = "Added, and the tenant's quota republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id)}`", body = Object),
        (status = 400, description = "A malformed tenant name or body, naming the field: kind, a priority on a temporary grant, an amount outside 1..=2^53−1, a negative `expected_version`", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version` (a `ConflictBody`), or a grant with this id exists or existed (an `ErrorBody` naming `id`): ids are never reused", body = crate::openapi::ConflictOrDuplicateBody),
        (status = 422, description = "A grant that has already expired, or that expires before it starts", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/tenants/{tenant}/grants")]
pub async fn add_grant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<GrantBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let kind = match (body.kind.as_str(), body.priority) {
        ("temporary", None) => GrantKind::Temporary,
        ("temporary", Some(_)) => return Err(ApiError::bad_request("priority", "only bonus grants have a priority")),
        ("bonus", priority) => {
            let priority = priority.unwrap_or(0);
            if priority > i32::MAX as u32 {
                return Err(ApiError::bad_request("priority", format!("must be at most {}", i32::MAX)));
            }
            GrantKind::Bonus { priority }
        }
        (other, _) => {
            return Err(ApiError::bad_request("kind", format!("must be \"temporary\" or \"bonus\", got {other:?}")))
        }
    };
    let amount =
        body.amount.as_i64().map(i128::from).ok_or_else(|| ApiError::bad_request("amount", "must be an integer"))?;
    let grant = NewGrant {
        id: body.id,
        kind,
        amount: Tokens::parse("amount", amount)?,
        starts_at: body.starts_at,
        expires_at: body.expires_at,
    };
    let expected_version = body.expected_version.map(expected).transpose()?;
    let written = config::add_grant(&state.db, &who.ctx(), &tenant, &grant, expected_version, chrono::Utc::now())
        .await
        .map_err(change_error)?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Created().json(written_json(&[written], published)))
}

/// A revocation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = String, max_length = 500)]
    reason: Option<String>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    expected_version: Option<i64>,
}

/// `POST /api/v1/tenants/{tenant}/grants/{id}/revoke` with `{"reason",
/// "expected_version"?}`: the grant is no longer published; its row and history stay.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant"), ("id" = String, Path, description = "The grant's id: 1..=64 of `[A-Za-z0-9_-]`, not `plan`")),
    responses(
        (status = 200, description = "Revoked, and the tenant's quota republished: `{\"entity\", \"version\", \"audit_id\", \"published\" (whether Redis has it already; the outbox delivers it otherwise), \"changes\" (every entity written: entity, action, version, audit_id, outbox_id)}`", body = Object),
        (status = 400, description = "A malformed tenant name, grant id or body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 401, description = "No credentials, an unknown or revoked token, or an expired session", body = ErrorBody),
        (status = 403, description = "Not allowed: needs role pm or admin, an admin-scope API token or the configured admin token (permission edit); or a session write from another origin or without its X-CSRF-Token", body = ErrorBody),
        (status = 404, description = "Unknown tenant, or the tenant has no such grant", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "The grant was already revoked", body = ErrorBody),
        (status = 503, description = "Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/tenants/{tenant}/grants/{id}/revoke")]
pub async fn revoke_grant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<RevokeBody>,
) -> Result<HttpResponse, ApiError> {
    let (tenant, id) = path.into_inner();
    let tenant = tenant_id(&tenant)?;
    let id = GrantId::parse(&id)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let expected_version = body.expected_version.map(expected).transpose()?;
    let written =
        config::revoke_grant(&state.db, &who.ctx(), &tenant, &id, expected_version).await.map_err(change_error)?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(written_json(&[written], published)))
}
