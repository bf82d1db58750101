//! The admin API for plans. Reads need permission `read`, writes `edit`. A change to a plan
//! republishes every tenant on it.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::plans::{PlanChanged, PlanCreated, PlanList, PlanRestored};
use api::WriteReply;
use serde::Deserialize;
use serde_json::json;

use super::{store, PlanName, PlanSpec};
use crate::error::{ApiError, ErrorBody};
use crate::http::{actor, expected, malformed};
use crate::publish::publish_now;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_plans)
        .service(create_plan)
        .service(get_plan)
        .service(update_plan)
        .service(plan_versions)
        .service(restore_plan);
}

/// `GET /api/v1/plans` → every plan with how many tenants it has.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every plan, by name: each with how many tenants it has", body = PlanList),
    ),
)]
#[get("/api/v1/plans")]
pub async fn list_plans(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let plans = store::list_plans(&state.db).await?;
    Ok(HttpResponse::Ok().json(PlanList { plans }))
}

/// `GET /api/v1/plans/{plan}` → the plan, or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The plan", body = super::Plan),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 400, description = "A malformed plan name (naming `plan`)", body = ErrorBody),
    ),
)]
#[get("/api/v1/plans/{plan}")]
pub async fn get_plan(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = PlanName::parse(&path).map_err(malformed)?;
    match store::get_plan(&state.db, &name).await? {
        Some(plan) => Ok(HttpResponse::Ok().json(plan)),
        None => Err(ApiError::NotFound(format!("unknown plan {:?}", name.as_str()))),
    }
}

/// A plan to create or change as sent: the limits, and the bookkeeping of the change. One
/// type for both, so that a misplaced field (an `expected_version` when creating, a missing
/// one when changing) is refused naming it; documented as [`NewPlan`] and [`PlanChange`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanBody {
    /// The plan's name: required to create; when changing, the path's name or left out (a
    /// plan cannot be renamed).
    name: Option<PlanName>,
    /// Each limit is parsed on its own, so an error names its field.
    monthly_tokens: serde_json::Value,
    daily_requests: serde_json::Value,
    concurrency: serde_json::Value,
    /// Creating: must be left out. Changing: required.
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    expected_version: Option<i64>,
    reason: Option<String>,
}

/// The body of `POST /api/v1/plans`: a new plan's name and limits.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPlan {
    /// The plan's name, 1..=64 of `[A-Za-z0-9_-]`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    /// Tokens per UTC calendar month, 0..=2^53−1.
    #[schema(maximum = 9007199254740991_u64)]
    pub monthly_tokens: u64,
    /// Requests per UTC day, 0..=2^53−1.
    #[schema(maximum = 9007199254740991_u64)]
    pub daily_requests: u64,
    /// Reservations open at once, 0..=2^31−1.
    #[schema(maximum = 2147483647)]
    pub concurrency: u32,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    pub reason: Option<crate::schema::Reason>,
}

/// The body of `PUT /api/v1/plans/{plan}`: the plan's new limits, against its version. (The
/// path's own name may be repeated as `name`; a plan cannot be renamed.)
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanChange {
    /// Tokens per UTC calendar month, 0..=2^53−1.
    #[schema(maximum = 9007199254740991_u64)]
    pub monthly_tokens: u64,
    /// Requests per UTC day, 0..=2^53−1.
    #[schema(maximum = 9007199254740991_u64)]
    pub daily_requests: u64,
    /// Reservations open at once, 0..=2^31−1.
    #[schema(maximum = 2147483647)]
    pub concurrency: u32,
    /// The plan's version this change was made against.
    #[schema(minimum = 0)]
    pub expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    pub reason: Option<crate::schema::Reason>,
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
    request_body(content = NewPlan),
    responses(
        (status = 201, description = "Created", body = PlanCreated),
        (status = 400, description = "A malformed body, naming the field: a missing `name`, an `expected_version` given, a limit out of range", body = ErrorBody),
        (status = 409, description = "The name is taken: an `ErrorBody` naming `name`", body = ErrorBody),
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
    let (written, plan) = store::create_plan(&state.db, &who.ctx(), &name, &spec).await?;
    Ok(HttpResponse::Created().json(PlanCreated { plan, audit_id: written.audit_id, version: written.version }))
}

/// `PUT /api/v1/plans/{plan}` with `{"monthly_tokens", "daily_requests", "concurrency",
/// "expected_version", "reason"?}`: every tenant on the plan is republished.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    request_body(content = PlanChange),
    responses(
        (status = 200, description = "Changed, and every tenant on the plan republished", body = PlanChanged),
        (status = 400, description = "A malformed body, naming the field: a malformed plan name in the path, a `name` other than the path's, a missing or negative `expected_version`, a limit out of range", body = ErrorBody),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 409, description = "The plan is at another version than `expected_version` (a `ConflictBody`), or the `plans` approval policy applies (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
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
    let (written, plan) = crate::tenants::update_plan(&state.db, &who.ctx(), &name, &spec, expected_version).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(PlanChanged { write: WriteReply::of(&written, published), plan }))
}

/// `GET /api/v1/plans/{plan}/versions` → the plan's versions, newest first, each with its
/// limits, who made it and how.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The current version and every recorded one, newest first (`snapshot`: the plan as written)", body = api::pools::PoolHistory),
        (status = 400, description = "A malformed plan name", body = ErrorBody),
        (status = 404, description = "Unknown plan", body = ErrorBody),
    ),
)]
#[get("/api/v1/plans/{plan}/versions")]
pub async fn plan_versions(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = PlanName::parse(&path).map_err(malformed)?;
    let history = store::plan_history(&state.db, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown plan {:?}", name.as_str())))?;
    Ok(HttpResponse::Ok().json(history))
}

/// `POST /api/v1/plans/{plan}/restore` with `{"version", "reason", "expected_version"}`:
/// a new version of the plan whose limits equal version `version`'s (audited as
/// `plan.restore_version`), every tenant on it republished; says which versions it undid.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "Restored and republished", body = PlanRestored),
        (status = 400, description = "A malformed plan name or body, a version below 1, a negative `expected_version`, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown plan, or a version its history does not hold", body = ErrorBody),
        (status = 409, description = "The plan is at another version than `expected_version` (a `ConflictBody`), or the `plans` approval policy applies (an `ErrorBody` naming `policy`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The version is the current one (field `version`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/plans/{plan}/restore")]
pub async fn restore_plan(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<crate::http::RestoreBody>,
) -> Result<HttpResponse, ApiError> {
    let name = PlanName::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, true)?;
    if body.version < 1 {
        return Err(ApiError::bad_request("version", "must be a version (1 or more)"));
    }
    let reason = format!("restores version {}: {}", body.version, who.reason.as_deref().unwrap_or(""));
    let ctx = crate::change::Ctx { reason: Some(&reason), ..who.ctx() };
    let (written, plan, undoes) =
        crate::tenants::restore_plan(&state.db, &ctx, &name, body.version, expected(body.expected_version)?).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(PlanRestored {
        write: WriteReply::of(&written, published),
        plan,
        restored_from: body.version,
        undoes,
    }))
}
