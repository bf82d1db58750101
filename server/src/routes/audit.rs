//! The audit trail over HTTP: list with filters and a cursor, verify the chain, export CSV.

use actix_web::{get, web, HttpResponse};

use crate::db::audit::{export_audit_csv, list_audit, verify_audit, AuditFilter};
use crate::error::ApiError;
use crate::state::AppState;

/// Postgres errors: unreachable → 503; anything else → 500.
pub fn db_error(e: sqlx::Error) -> ApiError {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
            ApiError::Unavailable(format!("postgres unavailable: {e}"))
        }
        other => ApiError::Unexpected(anyhow::Error::new(other)),
    }
}

fn checked(filter: &AuditFilter) -> Result<(), ApiError> {
    if let Some(limit) = filter.limit {
        if !(1..=500).contains(&limit) {
            return Err(ApiError::bad_request("limit", "must be in 1..=500"));
        }
    }
    if let (Some(from), Some(to)) = (filter.from, filter.to) {
        if to <= from {
            return Err(ApiError::bad_request("to", "must be after from"));
        }
    }
    Ok(())
}

/// `GET /api/v1/audit?entity=&actor=&action=&from=&to=&before_id=&limit=` → newest first,
/// `{"rows": [...], "next": <before_id of the next page> | null}`.
#[get("/api/v1/audit")]
pub async fn list(state: web::Data<AppState>, filter: web::Query<AuditFilter>) -> Result<HttpResponse, ApiError> {
    checked(&filter)?;
    Ok(HttpResponse::Ok().json(list_audit(&state.db, &filter).await.map_err(db_error)?))
}

/// `GET /api/v1/audit/verify` → `{"intact": bool, "rows": n, "first_broken": id | null,
/// "problem": "content" | "link" | "gap" | null}`.
#[get("/api/v1/audit/verify")]
pub async fn verify(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(verify_audit(&state.db).await.map_err(db_error)?))
}

/// `GET /api/v1/audit.csv` with the same filters as the list: every matching row, oldest first.
#[get("/api/v1/audit.csv")]
pub async fn export(state: web::Data<AppState>, filter: web::Query<AuditFilter>) -> Result<HttpResponse, ApiError> {
    checked(&filter)?;
    let csv = export_audit_csv(&state.db, &filter).await.map_err(db_error)?;
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header(("content-disposition", "attachment; filename=\"audit.csv\""))
        .body(csv))
}
