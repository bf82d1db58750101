//! Health endpoints: per pool and per channel state, base and effective weight, window
//! rates, last transition and why, suggested weights; transition history; pins; a pool's
//! thresholds.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::health::{ChannelHealth, HealthHistory, PinChanged, PolicyStored, PoolHealth};
use api::WriteReply;
use client::pool::{PoolName, ReweightMode};
use engine::health::Pin;
use serde::Deserialize;
use serde_json::Value;

use crate::channels::ChannelCode;
use crate::error::{ApiError, ErrorBody};
use crate::http::{actor, malformed};
use crate::publish::{publish_now, rebuild_published_if_needed};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(pool_health).service(channel_health).service(history).service(pin).service(unpin).service(put_policy);
}

/// `GET /api/v1/pools/{pool}/health` → policy, cap (`max_ejected_percent`,
/// `ejected_percent`, `bound`) and each member's state, base and effective weight,
/// factor, window success rate and volume, last transition and why, suggested weight.
#[utoipa::path(
    tag = "health",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The policy, the ejection cap, and each member's state, base and effective weight, factor, window success rate and volume, last transition and why, suggested weight", body = PoolHealth),
        (status = 400, description = "A malformed pool name", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
    ),
)]
#[get("/api/v1/pools/{pool}/health")]
pub async fn pool_health(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    match crate::health::pool_health(&state.db, &pool).await? {
        Some(health) => Ok(HttpResponse::Ok().json(health)),
        None => Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str()))),
    }
}

/// `GET /api/v1/channels/{code}/health` → the pin and the channel's health in every pool
/// that holds it.
#[utoipa::path(
    tag = "health",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "The channel's pin (or null) and its health in every pool that holds it", body = ChannelHealth),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 400, description = "A malformed channel code (naming `code`)", body = ErrorBody),
    ),
)]
#[get("/api/v1/channels/{code}/health")]
pub async fn channel_health(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    match crate::health::channel_health(&state.db, &code).await? {
        Some(health) => Ok(HttpResponse::Ok().json(health)),
        None => Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str()))),
    }
}

/// The history query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// How many transitions, 1..=1000 (default 200).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
}

/// `GET /api/v1/channels/{code}/health/history?limit=` (1..=1000, default 200) → the
/// channel's transitions, newest first: pool, time, from, to, factors, rate, volume, why.
#[utoipa::path(
    tag = "health",
    operation_id = "channel_health_history",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$"), HistoryQuery),
    responses(
        (status = 200, description = "The channel's transitions, newest first", body = HealthHistory),
        (status = 400, description = "A malformed channel code, or a malformed or unknown query parameter, naming it", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
    ),
)]
#[get("/api/v1/channels/{code}/health/history")]
pub async fn history(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<HistoryQuery>,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    let limit = match query.limit.as_deref() {
        None => 200,
        Some(raw) => raw
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| ApiError::bad_request("limit", "must be an integer in 1..=1000"))?,
    };
    if crate::channels::store::get_channel(&state.db, &code).await?.is_none() {
        return Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str())));
    }
    let rows = crate::health::history(&state.db, &code, limit).await?;
    Ok(HttpResponse::Ok().json(HealthHistory { channel: code.as_str().to_owned(), transitions: rows }))
}

/// A pin.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    /// `healthy` (full weight whatever the outcomes) or `ejected`.
    #[schema(value_type = crate::schema::Pin)]
    state: Pin,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `POST /api/v1/channels/{code}/health/pin` with `{"state": "healthy"|"ejected",
/// "reason"}`: health evaluation leaves the channel where the operator put it, in every
/// pool, until unpinned. Audited; the pools holding it are republished (an ejection pin
/// rebuilds them at once).
#[utoipa::path(
    tag = "health",
    operation_id = "pin_channel",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "Pinned or unpinned, and every pool whose publication changed republished", body = PinChanged),
        (status = 400, description = "A malformed channel code in the path or a malformed body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 422, description = "The channel is already pinned in that state", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/health/pin")]
pub async fn pin(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PinBody>,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let written = crate::health::set_pin(&state.db, &who.ctx(), &code, Some(body.state)).await?;
    finish(&state, written, body.state == Pin::Ejected).await
}

/// An unpin.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnpinBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `POST /api/v1/channels/{code}/health/unpin` with `{"reason"}`: health evaluation
/// decides again.
#[utoipa::path(
    tag = "health",
    operation_id = "unpin_channel",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "Pinned or unpinned, and every pool whose publication changed republished", body = PinChanged),
        (status = 400, description = "A malformed channel code in the path or a malformed body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 422, description = "The channel is not pinned", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/health/unpin")]
pub async fn unpin(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<UnpinBody>,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let written = crate::health::set_pin(&state.db, &who.ctx(), &code, None).await?;
    finish(&state, written, false).await
}

async fn finish(
    state: &AppState,
    written: Vec<crate::change::Written>,
    ejection: bool,
) -> Result<HttpResponse, ApiError> {
    let published = publish_now(state).await;
    let mut rebuilt = Vec::new();
    if published && ejection {
        for w in written.iter().skip(1) {
            let Ok(crate::change::Entity::Pool(name)) = crate::change::Entity::parse(&w.entity) else { continue };
            if rebuild_published_if_needed(state, &name, ReweightMode::Immediate).await {
                rebuilt.push(name.to_string());
            }
        }
    }
    Ok(HttpResponse::Ok().json(PinChanged { write: WriteReply::of(&written, published), rebuilt }))
}

/// A pool's health thresholds.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    /// Overrides of the defaults, e.g. `{"min_volume": 50, "decay_factor": 0.7}`.
    #[schema(value_type = crate::schema::HealthPolicy)]
    policy: Value,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `PUT /api/v1/pools/{pool}/health_policy` with `{"policy": {…}, "reason"}`: the pool's
/// health thresholds (window_minutes, min_volume, min_success_rate, decay_factor,
/// cooldown_ms, eject_below, max_ejected_percent, quiet_ms, slow_start_ms, ewma_alpha);
/// fields left out take the defaults; `422` naming the field out of range.
#[utoipa::path(
    tag = "health",
    operation_id = "put_health_policy",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Stored and audited (nothing is published: the next evaluation uses it)", body = PolicyStored),
        (status = 400, description = "A malformed pool name or body, a missing reason, or a policy that does not parse (an unknown field or a wrong type; field `health_policy`)", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "An approval policy applies to the pool (naming `policy`): the health job would eject and decay by this policy with no request, so it changes only through the policy's review", body = ErrorBody),
        (status = 422, description = "A threshold out of range, naming it (`health_policy.<field>`)", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}/health_policy")]
pub async fn put_policy(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PolicyBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let (policy, audit_id) = crate::health::set_policy(&state.db, &who.ctx(), &pool, &body.policy).await?;
    Ok(HttpResponse::Ok().json(PolicyStored { pool: pool.as_str().to_owned(), policy, audit_id }))
}
