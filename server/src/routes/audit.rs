//! The audit trail over HTTP: list with filters and a cursor, verify the chain, export CSV.

use actix_web::{get, web, HttpResponse};

use crate::db::audit::{export_audit_csv, list_audit, verify_audit, AuditFilter};
use crate::error::ApiError;
use crate::state::AppState;

/// Postgres errors: unreachable → 503; anything else → 500.
pub fn db_error(e: sqlx::Error) -> ApiError {
    let unavailable = match &e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => true,
        // Shutting down (57P0x) or connection failures (08xxx) while a query ran.
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
        _ => false,
    };
    if unavailable {
        ApiError::Unavailable(format!("postgres unavailable: {e}"))
    } else {
        ApiError::Unexpected(anyhow::Error::new(e))
    }
}

/// The audit query as sent: every parameter a string, parsed one by one so that an error
/// names the parameter.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    entity: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    from: Option<String>,
    to: Option<String>,
    before_id: Option<String>,
    limit: Option<String>,
}

fn time(field: &str, raw: &Option<String>) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    raw.as_deref()
        .map(|t| {
            chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| ApiError::bad_request(field, format!("must be an RFC 3339 time ({e})")))
        })
        .transpose()
}

fn parse(query: &AuditQuery) -> Result<AuditFilter, ApiError> {
    let limit = match &query.limit {
        None => None,
        Some(raw) => match raw.parse::<i64>() {
            Ok(n) if (1..=500).contains(&n) => Some(n),
            _ => return Err(ApiError::bad_request("limit", "must be an integer in 1..=500")),
        },
    };
    let before_id = match &query.before_id {
        None => None,
        Some(raw) => Some(raw.parse::<i64>().map_err(|_| ApiError::bad_request("before_id", "must be an integer"))?),
    };
    let filter = AuditFilter {
        entity: query.entity.clone(),
        actor: query.actor.clone(),
        action: query.action.clone(),
        from: time("from", &query.from)?,
        to: time("to", &query.to)?,
        before_id,
        limit,
    };
    if let (Some(from), Some(to)) = (filter.from, filter.to) {
        if to <= from {
            return Err(ApiError::bad_request("to", "must be after from"));
        }
    }
    Ok(filter)
}

/// `GET /api/v1/audit?entity=&actor=&action=&from=&to=&before_id=&limit=` → newest first,
/// `{"rows": [...], "next": <before_id of the next page> | null}`.
#[get("/api/v1/audit")]
pub async fn list(state: web::Data<AppState>, query: web::Query<AuditQuery>) -> Result<HttpResponse, ApiError> {
    let filter = parse(&query)?;
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
pub async fn export(state: web::Data<AppState>, query: web::Query<AuditQuery>) -> Result<HttpResponse, ApiError> {
    let filter = parse(&query)?;
    let csv = export_audit_csv(&state.db, &filter).await.map_err(db_error)?;
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header(("content-disposition", "attachment; filename=\"audit.csv\""))
        .body(csv))
}
