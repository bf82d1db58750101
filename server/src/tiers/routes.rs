//! Adaptive-tier endpoints: a pool's tier policy with its channels' streaks and moves, and
//! a person's decision on a move offered.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::tiers::{AdaptiveTiers, TierMoveDecided, TierPolicyStored};
use api::WriteReply;
use client::pool::PoolName;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ErrorBody};
use crate::http::actor;
use crate::publish::publish_now;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(get_tier_policy).service(put_tier_policy).service(accept_tier_move).service(dismiss_tier_move);
}

/// `GET /api/v1/pools/{pool}/tier_policy` → the pool's tier policy (defaults filled in),
/// each channel's tier and what its recent windows said, and the newest 50 moves.
#[utoipa::path(
    tag = "health",
    operation_id = "get_tier_policy",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The policy, each channel's tier and streak, and the newest 50 moves, newest first", body = AdaptiveTiers),
        (status = 400, description = "A malformed pool name", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
    ),
)]
#[get("/api/v1/pools/{pool}/tier_policy")]
pub async fn get_tier_policy(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    match crate::tiers::read(&state.db, &pool).await? {
        Some(tiers) => Ok(HttpResponse::Ok().json(tiers)),
        None => Err(crate::pools::unknown_pool(&pool)),
    }
}

/// A pool's tier policy.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TierPolicyBody {
    /// Overrides of the defaults, e.g. `{"mode": "suggest", "windows": 3}`.
    #[schema(value_type = crate::schema::TierPolicy)]
    policy: Value,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `PUT /api/v1/pools/{pool}/tier_policy` with `{"policy": {…}, "reason"}`: how the pool
/// re-rates its channels into G / N / U (mode off, suggest or automatic; window_minutes,
/// min_volume, good_at_least, normal_at_least, margin, windows, cooldown_ms); fields left
/// out take the defaults; audited; the channels' streaks start again under it.
#[utoipa::path(
    tag = "health",
    operation_id = "put_tier_policy",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Stored and audited (nothing is published: the next window is judged under it)", body = TierPolicyStored),
        (status = 400, description = "A malformed pool name or body, a missing reason, or a policy that does not parse (an unknown field or a wrong type; field `tier_policy`)", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "An approval policy applies to the pool and the mode is not off (naming `policy`): moves would change its configuration without a review; set the mode through a change request or keep it off", body = ErrorBody),
        (status = 422, description = "A field out of range, `normal_at_least` less than twice the margin below `good_at_least`, `good_at_least` above 1 − margin, or `normal_at_least` not above the margin (naming `tier_policy.<field>`); a mode other than off for a pool that is not of kind tiers (`tier_policy.mode`)", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}/tier_policy")]
pub async fn put_tier_policy(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<TierPolicyBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let (policy, audit_id) = crate::tiers::set_policy(&state.db, &who.ctx(), &pool, &body.policy).await?;
    Ok(HttpResponse::Ok().json(TierPolicyStored { pool: pool.as_str().to_owned(), policy, audit_id }))
}

/// A decision on a move.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// The pool and the move's id a decision's path names (400 naming `id` for an id that is
/// not a whole number of at least 1).
fn move_path(path: web::Path<(String, String)>) -> Result<(PoolName, i64), ApiError> {
    let (pool, id) = path.into_inner();
    let pool = PoolName::parse(&pool)?;
    let id = id.parse::<i64>().ok().filter(|id| *id >= 1).ok_or_else(|| ApiError::BadRequest {
        field: "id".into(),
        rule: "must be a whole number of at least 1".into(),
    })?;
    Ok((pool, id))
}

/// `POST /api/v1/pools/{pool}/tier_moves/{id}/accept` with `{"reason"}`: makes the move an
/// open suggestion calls for, as the caller's audited change (the channel's registration,
/// when it has a tier, and every tiers pool that holds it), and publishes it.
#[utoipa::path(
    tag = "health",
    operation_id = "accept_tier_move",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(
        ("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`"),
        ("id" = String, Path, description = "The move's id: a whole number of at least 1", pattern = "^[1-9][0-9]{0,17}$"),
    ),
    responses(
        (status = 200, description = "Accepted: the move made and published", body = TierMoveDecided),
        (status = 400, description = "A malformed pool name, move id or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool, or the pool has no such move", body = ErrorBody),
        (status = 409, description = "The move is not open (`state`), the channel's tier changed since (`move`: it is superseded now), or an approval policy applies (`policy`): propose the change with `POST /api/v1/changes`", body = ErrorBody),
        (status = 422, description = "A pool holding the channel cannot take the move (a tier with weight left without channels, or a tier the pool has no weight for)", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/tier_moves/{id}/accept")]
pub async fn accept_tier_move(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<DecisionBody>,
) -> Result<HttpResponse, ApiError> {
    let (pool, id) = move_path(path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let (decided, written) = crate::tiers::accept(&state.db, &who.ctx(), &pool, id).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok()
        .json(TierMoveDecided { tier_move: decided, write: Some(WriteReply::of(&written, published)) }))
}

/// `POST /api/v1/pools/{pool}/tier_moves/{id}/dismiss` with `{"reason"}`: the move is not
/// made (the reason is kept with it; the cool-down it started stays).
#[utoipa::path(
    tag = "health",
    operation_id = "dismiss_tier_move",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(
        ("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`"),
        ("id" = String, Path, description = "The move's id: a whole number of at least 1", pattern = "^[1-9][0-9]{0,17}$"),
    ),
    responses(
        (status = 200, description = "Dismissed", body = TierMoveDecided),
        (status = 400, description = "A malformed pool name, move id or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool, or the pool has no such move", body = ErrorBody),
        (status = 409, description = "The move is not open (`state`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/tier_moves/{id}/dismiss")]
pub async fn dismiss_tier_move(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<DecisionBody>,
) -> Result<HttpResponse, ApiError> {
    let (pool, id) = move_path(path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let decided = crate::tiers::dismiss(&state.db, &who.ctx(), &pool, id).await?;
    Ok(HttpResponse::Ok().json(TierMoveDecided { tier_move: decided, write: None }))
}
