//! The audit trail over HTTP: list with filters and a cursor, verify the chain, export CSV.

use actix_web::{get, web, HttpResponse};

use super::store::{export_audit_csv, list_audit, try_verify_audit, AuditFilter, AuditPage, ChainReport};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The audit query as sent: every parameter a string, parsed one by one so that an error
/// names the parameter.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only rows about this entity (`pool:eu`, `tenant:acme`, …). No control characters, in
    /// this and the other text filters.
    #[param(pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    entity: Option<String>,
    /// Only rows by this actor.
    #[param(pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    actor: Option<String>,
    /// Only rows of this action (`pool.weights`, `pool.eject`, …).
    #[param(pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    action: Option<String>,
    /// Only rows at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<String>,
    /// Only rows before this time (RFC 3339); must be after `from`.
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<String>,
    /// Cursor: only rows with a smaller id (the `next` of the previous page).
    #[param(value_type = Option<i64>)]
    before_id: Option<String>,
    /// Page size, 1..=500 (default 100).
    #[param(value_type = Option<i64>, minimum = 1, maximum = 500)]
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

/// A text filter as sent, refused when it holds a control character: Postgres cannot hold a
/// NUL in text, and no entity, actor or action name holds any control character.
fn text(field: &str, raw: &Option<String>) -> Result<Option<String>, ApiError> {
    match raw {
        Some(t) if t.chars().any(char::is_control) => {
            Err(ApiError::bad_request(field, "must not contain control characters"))
        }
        _ => Ok(raw.clone()),
    }
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
        entity: text("entity", &query.entity)?,
        actor: text("actor", &query.actor)?,
        action: text("action", &query.action)?,
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

/// Lists audit rows, newest first, with filters and a cursor.
///
/// `{"rows": [...], "next": <before_id of the next page> | null}`.
#[utoipa::path(
    tag = "audit",
    operation_id = "list_audit",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of rows, newest first", body = AuditPage),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
    )
)]
#[get("/api/v1/audit")]
pub async fn list(state: web::Data<AppState>, query: web::Query<AuditQuery>) -> Result<HttpResponse, ApiError> {
    let filter = parse(&query)?;
    Ok(HttpResponse::Ok().json(list_audit(&state.db, &filter).await?))
}

/// How much of the chain to check.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct VerifyQuery {
    /// `true` checks every row; otherwise (default) the check starts after the newest
    /// signed checkpoint that still matches its row.
    #[param(value_type = Option<bool>)]
    full: Option<String>,
}

/// Verifies the audit log's hash chain and signatures, recomputed by the server: no row
/// after the starting checkpoint (every row with `full=true`) was edited or removed.
///
/// `{"intact": bool, "rows": n, "first_broken": id | null, "problem": "content" | "link" |
/// "gap" | "signature" | "unsigned" | "checkpoint" | null, "head_id", "head_hash", "keyed",
/// "checkpoint_id", "checked_from", "forged_checkpoints"}`.
#[utoipa::path(
    tag = "audit",
    operation_id = "verify_audit",
    params(VerifyQuery),
    responses(
        (status = 200, description = "The chain's state (a broken chain is still a 200, with `intact: false`)", body = ChainReport),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
        (status = 429, description = "A check of the chain is under way on this instance: retry after `Retry-After` seconds", body = ErrorBody),
    )
)]
#[get("/api/v1/audit/verify")]
pub async fn verify(state: web::Data<AppState>, query: web::Query<VerifyQuery>) -> Result<HttpResponse, ApiError> {
    let full = match query.full.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::bad_request("full", "must be true or false")),
    };
    match try_verify_audit(&state.db, full, &state.audit_verify).await? {
        Some(report) => Ok(HttpResponse::Ok().json(report)),
        None => Err(ApiError::Throttled {
            message: "a check of the audit chain is under way on this instance: retry shortly".to_owned(),
            retry_after_secs: 5,
        }),
    }
}

/// Exports every audit row matching the list's filters as CSV, oldest first (streamed).
#[utoipa::path(
    tag = "audit",
    operation_id = "export_audit_csv",
    params(AuditQuery),
    responses(
        (status = 200, description = "Every matching row, oldest first (an attachment, `audit.csv`)", body = String, content_type = "text/csv"),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
    )
)]
#[get("/api/v1/audit.csv")]
pub async fn export(state: web::Data<AppState>, query: web::Query<AuditQuery>) -> Result<HttpResponse, ApiError> {
    use futures::{StreamExt, TryStreamExt};
    let filter = parse(&query)?;
    let mut pages = Box::pin(export_audit_csv(state.db.clone(), filter));
    // The first page before the status line: a Postgres failure then is a 503, not a 200 cut short.
    let first = pages.try_next().await?.unwrap_or_default();
    let pages = futures::stream::once(async move { Ok(first) })
        .chain(pages)
        .map_ok(web::Bytes::from)
        .inspect_err(|e| tracing::error!(error = %e, "audit.csv cut short: Postgres failed while streaming"));
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header(("content-disposition", "attachment; filename=\"audit.csv\""))
        .streaming(pages))
}
