//! `GET /api/v1/usage/dead_letters`: the dead-letter list, newest first.

use actix_web::{get, web, HttpResponse};

use super::store::{self, DeadLetter};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_dead_letters);
}

/// The list's query.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterQuery {
    /// Rows before this id (the next page: the last id of this one).
    #[param(minimum = 1)]
    before: Option<i64>,
    /// At most this many rows (1..=500; default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// A page of the dead-letter list, newest first.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetterPage {
    pub rows: Vec<DeadLetter>,
    /// Rows in the whole list.
    pub total: i64,
}

/// `GET /api/v1/usage/dead_letters`: quota operations set aside because their tenant does
/// not exist, newest first (read permission).
#[utoipa::path(
    tag = "quota",
    operation_id = "list_dead_letters",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(DeadLetterQuery),
    responses(
        (status = 200, description = "A page of the list, newest first, and its total", body = DeadLetterPage),
        (status = 400, description = "A malformed query, naming the parameter", body = ErrorBody),
    ),
)]
#[get("/api/v1/usage/dead_letters")]
pub async fn list_dead_letters(
    state: web::Data<AppState>,
    query: web::Query<DeadLetterQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit", format!("must be 1..=500, got {limit}")));
    }
    if query.before.is_some_and(|b| b < 1) {
        return Err(ApiError::bad_request("before", "must be at least 1"));
    }
    let (rows, total) = store::list(&state.db, query.before, limit).await?;
    Ok(HttpResponse::Ok().json(DeadLetterPage { rows, total }))
}
