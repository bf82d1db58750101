//! The admin API for plans. Reads need permission `read`, writes `edit`. A change to a plan
//! republishes every tenant on it.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::plans::{PlanChanged, PlanCreated, PlanList};
use api::WriteReply;
use serde::Deserialize;
use serde_json::json;

use super::{store, PlanName, PlanSpec};
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::http::{actor, expected, malformed};
use crate::publish::publish_now;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_plans).service(create_plan).service(get_plan).service(update_plan);
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
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The plan", body = super::Plan),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 422, description = "A malformed plan name (naming `plan`)", body = ErrorBody),
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
        (status = 201, description = "Created", body = PlanCreated),
        (status = 400, description = "A malformed body, naming the field: a missing `name`, an `expected_version` given, a limit out of range", body = ErrorBody),
        (status = 409, description = "The name is taken: a version conflict with `expected_version` 0 and the plan's `current_version`", body = ConflictBody),
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
    params(("plan" = String, Path, description = "The plan's name: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed, and every tenant on the plan republished", body = PlanChanged),
        (status = 400, description = "A malformed body, naming the field: a `name` other than the path's, a missing or negative `expected_version`, a limit out of range", body = ErrorBody),
        (status = 404, description = "Unknown plan", body = ErrorBody),
        (status = 409, description = "The plan is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "A malformed plan name in the path (naming `plan`)", body = ErrorBody),
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
    let (written, plan) = store::update_plan(&state.db, &who.ctx(), &name, &spec, expected_version).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(PlanChanged { write: WriteReply::of(&written, published), plan }))
}
