//! Health endpoints: per pool and per channel state, base and effective weight, window
//! rates, last transition and why, suggested weights; transition history; pins; a pool's
//! thresholds.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use client::pool::{PoolName, ReweightMode};
use engine::health::Pin;
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin::{actor, change_error, publish_now, rebuild_if_needed, written_json};
use crate::db::config::{self, ChannelCode};
use crate::error::ApiError;
use crate::routes::audit::db_error;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(pool_health).service(channel_health).service(history).service(pin).service(unpin).service(put_policy);
}

/// `GET /api/v1/pools/{pool}/health` → policy, cap (`max_ejected_percent`,
/// `ejected_percent`, `bound`) and each member's state, base and effective weight,
/// factor, window success rate and volume, last transition and why, suggested weight.
#[get("/api/v1/pools/{pool}/health")]
pub async fn pool_health(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    match crate::health::pool_health(&state.db, &pool).await.map_err(db_error)? {
        Some(health) => Ok(HttpResponse::Ok().json(health)),
        None => Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str()))),
    }
}

/// `GET /api/v1/channels/{code}/health` → the pin and the channel's health in every pool
/// that holds it.
#[get("/api/v1/channels/{code}/health")]
pub async fn channel_health(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(change_error)?;
    match crate::health::channel_health(&state.db, &code).await.map_err(db_error)? {
        Some(health) => Ok(HttpResponse::Ok().json(health)),
        None => Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str()))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    limit: Option<String>,
}

/// `GET /api/v1/channels/{code}/health/history?limit=` (1..=1000, default 200) → the
/// channel's transitions, newest first: pool, time, from, to, factors, rate, volume, why.
#[get("/api/v1/channels/{code}/health/history")]
pub async fn history(state: web::Data<AppState>, path: web::Path<String>, query: web::Query<HistoryQuery>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(change_error)?;
    let limit = match query.limit.as_deref() {
        None => 200,
        Some(raw) => raw.parse::<i64>().ok().filter(|n| (1..=1000).contains(n)).ok_or_else(|| ApiError::bad_request("limit", "must be an integer in 1..=1000"))?,
    };
    if config::get_channel(&state.db, &code).await.map_err(db_error)?.is_none() {
        return Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str())));
    }
    let rows = crate::health::history(&state.db, &code, limit).await.map_err(db_error)?;
    Ok(HttpResponse::Ok().json(json!({"channel": code.as_str(), "transitions": rows})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinBody {
    /// `healthy` (full weight whatever the outcomes) or `ejected`.
    state: Pin,
    reason: Option<String>,
}

/// `POST /api/v1/channels/{code}/health/pin` with `{"state": "healthy"|"ejected",
/// "reason"}`: health evaluation leaves the channel where the operator put it, in every
/// pool, until unpinned. Audited; the pools holding it are republished (an ejection pin
/// rebuilds them at once).
#[post("/api/v1/channels/{code}/health/pin")]
pub async fn pin(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PinBody>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(change_error)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let written = crate::health::set_pin(&state.db, &who.ctx(), &code, Some(body.state)).await.map_err(change_error)?;
    finish(&state, written, body.state == Pin::Ejected).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnpinBody {
    reason: Option<String>,
}

/// `POST /api/v1/channels/{code}/health/unpin` with `{"reason"}`: health evaluation
/// decides again.
#[post("/api/v1/channels/{code}/health/unpin")]
pub async fn unpin(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<UnpinBody>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(change_error)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let written = crate::health::set_pin(&state.db, &who.ctx(), &code, None).await.map_err(change_error)?;
    finish(&state, written, false).await
}

async fn finish(state: &AppState, written: Vec<config::Written>, ejection: bool) -> Result<HttpResponse, ApiError> {
    let published = publish_now(state).await;
    let mut rebuilt = Vec::new();
    if published && ejection {
        for w in written.iter().skip(1) {
            let Some(name) = w.entity.strip_prefix("pool:").and_then(|p| PoolName::parse(p).ok()) else { continue };
            if let Ok(Some(snapshot)) = config::get_published_pool(&state.db, &name).await {
                if rebuild_if_needed(state, &name, &snapshot, ReweightMode::Immediate).await {
                    rebuilt.push(name.to_string());
                }
            }
        }
    }
    let mut reply = written_json(&written, published);
    reply["rebuilt"] = json!(rebuilt);
    Ok(HttpResponse::Ok().json(reply))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    /// Overrides of the defaults, e.g. `{"min_volume": 50, "decay_factor": 0.7}`.
    policy: Value,
    reason: Option<String>,
}

/// `PUT /api/v1/pools/{pool}/health_policy` with `{"policy": {…}, "reason"}`: the pool's
/// health thresholds (window_minutes, min_volume, min_success_rate, decay_factor,
/// cooldown_ms, eject_below, max_ejected_percent, quiet_ms, slow_start_ms, ewma_alpha);
/// fields left out take the defaults; `422` naming the field out of range.
#[put("/api/v1/pools/{pool}/health_policy")]
pub async fn put_policy(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PolicyBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let (policy, audit_id) = crate::health::set_policy(&state.db, &who.ctx(), &pool, &body.policy).await.map_err(change_error)?;
    Ok(HttpResponse::Ok().json(json!({"pool": pool.as_str(), "policy": policy, "audit_id": audit_id})))
}
