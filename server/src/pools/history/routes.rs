//! A pool's configuration history and restoring an earlier version:
//! `GET /api/v1/pools/{pool}/versions`, `POST /api/v1/pools/{pool}/restore`.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use api::pools::{PoolHistory, PoolRestored, PoolWriteReply};
use client::pool::{PoolName, ReweightMode};

use crate::error::{ApiError, ErrorBody};
use crate::http::{actor, expected};
use crate::pools::{pool_reply, unknown_pool};
use crate::publish::publish_now;
use crate::state::AppState;

/// The history's routes, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(pool_versions).service(restore_pool);
}

/// `GET /api/v1/pools/{pool}/versions` → the pool's recorded configuration versions,
/// newest first, each as configured (what `PUT` takes), with who made it and how.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The current configuration version and every recorded one, newest first (a pool configured before versions were recorded has its history from its next change on)", body = PoolHistory),
        (status = 400, description = "A malformed pool name", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
    ),
)]
#[get("/api/v1/pools/{pool}/versions")]
pub async fn pool_versions(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let history = super::store::pool_history(&state.db, &pool).await?.ok_or_else(|| unknown_pool(&pool))?;
    Ok(HttpResponse::Ok().json(history))
}

/// `POST /api/v1/pools/{pool}/restore` with `{"version", "reason", "expected_version"}`:
/// makes a new configuration version equal to version `version` (an ordinary audited,
/// published change; drain mode: the remaining tickets are drawn first), and says which
/// versions it undid.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Restored and published: `version` is the new configuration version, `restored_from` the one it equals, `undoes` the versions made since, oldest first", body = PoolRestored),
        (status = 400, description = "A malformed pool name or body, a version below 1, a negative `expected_version`, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool, or a configuration version the pool's history does not hold", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version` (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The version is the current one, or names a channel that is no longer registered or is disabled (field `version`), or would break a pool rule", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/restore")]
pub async fn restore_pool(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<crate::http::RestoreBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let expected_version = expected(body.expected_version)?;
    // The audit row says which version came back, beside the caller's reason.
    let reason = format!("restores configuration version {}: {}", body.version, who.reason.as_deref().unwrap_or(""));
    let ctx = crate::change::Ctx { reason: Some(&reason), ..who.ctx() };
    let (written, undoes) = super::store::restore_pool(&state.db, &ctx, &pool, body.version, expected_version).await?;
    let published = publish_now(&state).await;
    // Drain: the remaining tickets are drawn first, unless what the pool now ejects asks
    // for a rebuild (as for any change of weights).
    let mode = ReweightMode::Drain;
    let rebuilt = published && crate::publish::rebuild_if_needed(&state, &pool, &written.published, mode).await;
    let reply = PoolWriteReply {
        mode: Some(mode.as_str().to_owned()),
        rebuilt: Some(rebuilt),
        ejected: Some(written.published.ejected.iter().cloned().collect()),
        ..pool_reply(&written, published)
    };
    Ok(HttpResponse::Ok().json(PoolRestored { reply, restored_from: body.version, undoes }))
}
