//! `/api/v1/break-glass`: the risk-reducing operations made at once on pools under an
//! approval policy, and their acknowledgement by an auditor.

use actix_web::{get, post, web, HttpRequest, HttpResponse};
use api::changes::{BreakGlass, BreakGlassList};
use serde::Deserialize;

use crate::error::{ApiError, ErrorBody};
use crate::http::actor;
use crate::state::AppState;

/// Every route, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_break_glass).service(acknowledge_break_glass);
}

/// The list's filter.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BreakGlassQuery {
    /// `false`: only those waiting for acknowledgement; `true`: only acknowledged ones.
    #[param(pattern = "^(true|false)$")]
    acknowledged: Option<String>,
    /// The page, from 1 (100 flags a page; default 1).
    #[param(pattern = "^[1-9][0-9]{0,3}$")]
    page: Option<String>,
}

/// `GET /api/v1/break-glass?acknowledged=&page=` → one page of flags, newest first, with
/// how many the filter matches and how many wait for acknowledgement.
#[utoipa::path(
    tag = "audit",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(BreakGlassQuery),
    responses(
        (status = 200, description = "A page of flags, newest first (100 a page), the number the filter matches and the number waiting for acknowledgement", body = BreakGlassList),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
    ),
)]
#[get("/api/v1/break-glass")]
pub async fn list_break_glass(
    state: web::Data<AppState>,
    query: web::Query<BreakGlassQuery>,
) -> Result<HttpResponse, ApiError> {
    let acknowledged = match query.acknowledged.as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(ApiError::bad_request("acknowledged", "must be true or false")),
    };
    let page = match query.page.as_deref() {
        None => 1,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=9999).contains(p))
            .ok_or_else(|| ApiError::bad_request("page", "must be a whole number in 1..=9999"))?,
    };
    let (flags, total, unacknowledged) = super::store::page(&state.db, acknowledged, page).await?;
    Ok(HttpResponse::Ok().json(BreakGlassList { flags, page, total, unacknowledged }))
}

/// An acknowledgement.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcknowledgeBody {
    /// What the auditor found (1..=500 characters, not blank, no control characters): required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    comment: Option<String>,
}

/// `POST /api/v1/break-glass/{id}/acknowledge` with `{"comment"}`: an auditor (or admin)
/// signed in, other than who did the operation, acknowledges it, audited. API tokens and
/// the configured admin token stand for no one person and are refused (403).
#[utoipa::path(
    tag = "audit",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The flag's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Acknowledged", body = BreakGlass),
        (status = 400, description = "A malformed id or body, or a missing comment", body = ErrorBody),
        (status = 403, description = "The caller did the operation (another person acknowledges it), is not a person signed in (an API token or the configured admin token), or may not export the audit trail", body = ErrorBody),
        (status = 404, description = "No such flag", body = ErrorBody),
        (status = 409, description = "Acknowledged already (naming `id`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/break-glass/{id}/acknowledge")]
pub async fn acknowledge_break_glass(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<AcknowledgeBody>,
) -> Result<HttpResponse, ApiError> {
    let id = crate::http::path_id(&path, "a flag")?;
    // A second person, signed in: a token the actor minted (or the configured admin token)
    // would let the actor acknowledge their own operation under another name.
    crate::approvals::person_role(&crate::access::principal(&req)?, "acknowledging a break-glass flag")?;
    let who = actor(&req, &state, &body.comment, true).map_err(|e| match e {
        ApiError::BadRequest { rule, .. } => ApiError::bad_request("comment", rule),
        other => other,
    })?;
    Ok(HttpResponse::Ok().json(super::store::acknowledge(&state.db, &who.ctx(), id).await?))
}
