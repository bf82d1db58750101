//! The ramp API: start one on a pool (`POST /api/v1/pools/{pool}/ramps`; under an approval
//! policy propose it as a `pool.ramp` change request instead), list and read them, and
//! control them (`POST /api/v1/ramps/{id}/{promote|promote_to_end|pause|resume|step_back|abort}`).

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use api::ramps::{RampDetail, RampList, RampWriteReply};
use client::pool::PoolName;
use serde::Deserialize;

use super::plan::PlanInput;
use crate::error::{ApiError, ErrorBody};
use crate::http::{actor, expected, path_id};
use crate::state::AppState;

/// Every route, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(start_ramp)
        .service(pool_ramps)
        .service(list_ramps)
        .service(get_ramp)
        .service(promote)
        .service(promote_to_end)
        .service(pause)
        .service(resume)
        .service(step_back)
        .service(abort);
}

/// A ramp to start.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RampBody {
    pub plan: PlanInput,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    pub reason: Option<String>,
    /// The pool's configuration version the plan was made against (`version` of
    /// `GET /api/v1/pools/{pool}`): its weights then are the baseline.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    pub expected_version: i64,
}

/// `POST /api/v1/pools/{pool}/ramps` with `{"plan", "reason", "expected_version"}`: starts
/// a ramp from the pool's weights now; its first step is published at once.
#[utoipa::path(
    tag = "ramps",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    request_body = RampBody,
    responses(
        (status = 201, description = "Started: step 1 is published", body = RampWriteReply),
        (status = 400, description = "A malformed pool name or body, naming the field (`plan.steps[0].share`, …)", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "Another configuration version than `expected_version` (a `ConflictBody`), a live ramp on the pool, or an approval policy on it (propose a `pool.ramp` change request) (an `ErrorBody`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "Steps that do not lead from the pool's weights to the target, a tiers pool, or an unknown or disabled channel", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/ramps")]
pub async fn start_ramp(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<RampBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let expected_version = expected(body.expected_version)?;
    let now = chrono::Utc::now();
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &crate::change::Entity::pool_key(&pool)).await?;
    crate::gate::refuse_direct_write(&mut *tx, &pool).await?;
    let (row, written) =
        super::start::start_tx(&state, &mut tx, &who.ctx(), &pool, &body.plan, expected_version, None, now).await?;
    tx.commit().await?;
    let reply = super::view::written_reply(&state, &row, written).await?;
    Ok(HttpResponse::Created().json(reply))
}

/// The list's filter.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RampQuery {
    /// `true`: only running, paused and aborting ramps.
    #[param(pattern = "^(true|false)$")]
    live: Option<String>,
}

fn live_only(query: &RampQuery) -> Result<bool, ApiError> {
    match query.live.as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::bad_request("live", "must be true or false")),
    }
}

/// `GET /api/v1/ramps?live=` → ramps of every pool, newest first (at most 200).
#[utoipa::path(
    tag = "ramps",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(RampQuery),
    responses(
        (status = 200, description = "Ramps, newest first (at most 200)", body = RampList),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
    ),
)]
#[get("/api/v1/ramps")]
pub async fn list_ramps(state: web::Data<AppState>, query: web::Query<RampQuery>) -> Result<HttpResponse, ApiError> {
    let rows = super::store::list_ramps(&state.db, None, live_only(&query)?, 200).await?;
    Ok(HttpResponse::Ok().json(RampList { ramps: super::view::summaries(&rows) }))
}

/// `GET /api/v1/pools/{pool}/ramps` → the pool's ramps, newest first (at most 200).
#[utoipa::path(
    tag = "ramps",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`"), RampQuery),
    responses(
        (status = 200, description = "The pool's ramps, newest first (none for an unknown pool)", body = RampList),
        (status = 400, description = "A malformed pool name or parameter, naming it", body = ErrorBody),
    ),
)]
#[get("/api/v1/pools/{pool}/ramps")]
pub async fn pool_ramps(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<RampQuery>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let rows = super::store::list_ramps(&state.db, Some(pool.as_str()), live_only(&query)?, 200).await?;
    Ok(HttpResponse::Ok().json(RampList { ramps: super::view::summaries(&rows) }))
}

/// `GET /api/v1/ramps/{id}` → the ramp, its timeline, guards, events and last evaluations.
#[utoipa::path(
    tag = "ramps",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    responses(
        (status = 200, description = "The ramp", body = RampDetail),
        (status = 400, description = "A malformed number", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
    ),
)]
#[get("/api/v1/ramps/{id}")]
pub async fn get_ramp(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path, "a ramp")?;
    let detail =
        super::view::detail(&state, id).await?.ok_or_else(|| ApiError::NotFound(format!("unknown ramp {id}")))?;
    Ok(HttpResponse::Ok().json(detail))
}

/// A control's reason.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    pub reason: Option<String>,
}

async fn run_control(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
    control: &str,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&path, "a ramp")?;
    let who = actor(&req, &state, &body.reason, true)?;
    let (row, written) = super::control::control(&state, &who.ctx(), id, control, chrono::Utc::now()).await?;
    Ok(HttpResponse::Ok().json(super::view::written_reply(&state, &row, written).await?))
}

/// `POST /api/v1/ramps/{id}/promote` with `{"reason"}`: moves a ramp to its next step now. Role pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Moves a ramp to its next step now",
    description = "Role pm or admin. Audited as `ramp.promote` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.promote`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/promote")]
pub async fn promote(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "promote").await
}

/// `POST /api/v1/ramps/{id}/promote_to_end` with `{"reason"}`: moves a ramp to its target now, completing it. Role pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Moves a ramp to its target now, completing it",
    description = "Role pm or admin. Audited as `ramp.promote_to_end` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.promote_to_end`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/promote_to_end")]
pub async fn promote_to_end(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "promote_to_end").await
}

/// `POST /api/v1/ramps/{id}/pause` with `{"reason"}`: pauses a running ramp. Role operator, pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Pauses a running ramp",
    description = "Role operator, pm or admin. Audited as `ramp.pause` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.pause`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/pause")]
pub async fn pause(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "pause").await
}

/// `POST /api/v1/ramps/{id}/resume` with `{"reason"}`: resumes a paused ramp (refused when the pool was changed outside it). Role pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Resumes a paused ramp (refused when the pool was changed outside it)",
    description = "Role pm or admin. Audited as `ramp.resume` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.resume`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/resume")]
pub async fn resume(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "resume").await
}

/// `POST /api/v1/ramps/{id}/step_back` with `{"reason"}`: returns a ramp to its previous step and pauses it. Role operator, pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Returns a ramp to its previous step and pauses it",
    description = "Role operator, pm or admin. Audited as `ramp.step_back` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.step_back`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/step_back")]
pub async fn step_back(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "step_back").await
}

/// `POST /api/v1/ramps/{id}/abort` with `{"reason"}`: aborts a ramp: back to the baseline at once or over the plan's abort_seconds (a second abort finishes at once); never restarts. Role operator, pm or admin.
#[utoipa::path(
    tag = "ramps",
    summary = "Aborts a ramp: back to the baseline at once or over the plan's abort_seconds (a second abort finishes at once); never restarts",
    description = "Role operator, pm or admin. Audited as `ramp.abort` with the reason.",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = i64, Path, description = "The ramp's number", minimum = 1, maximum = 999999999999999999_i64)),
    request_body = ControlBody,
    responses(
        (status = 200, description = "Done, audited as `ramp.abort`", body = RampWriteReply),
        (status = 400, description = "A malformed number or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown ramp", body = ErrorBody),
        (status = 409, description = "The ramp's state does not allow it, or the pool was changed outside the ramp (naming `state`): nothing changed", body = ErrorBody),
    ),
)]
#[post("/api/v1/ramps/{id}/abort")]
pub async fn abort(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    run_control(req, state, path, body, "abort").await
}
