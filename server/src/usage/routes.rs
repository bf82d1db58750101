//! A tenant's usage from the usage ledger, as JSON or CSV, for billing and audit. Reads
//! need permission `read`.

use actix_web::{get, web, HttpResponse};
use api::tenants::{UsageGroup, UsageReport, UsageRow};
use chrono::{DateTime, Datelike, Utc};
use client::quota::TenantId;

use super::store;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The longest span one report covers.
const MAX_DAYS: i64 = 400;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(usage).service(usage_csv);
}

/// The usage query as sent: each parameter parsed alone, so that an error names it.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// The first instant included (RFC 3339; default: the start of the current UTC month).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<String>,
    /// The first instant not included (RFC 3339; default: now); after `from`, at most 400
    /// days later.
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<String>,
    /// `day` (default) or `model`.
    #[param(value_type = Option<UsageGroup>)]
    group: Option<String>,
}

fn time(field: &str, raw: &Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    raw.as_deref()
        .map(|t| {
            DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| ApiError::bad_request(field, format!("must be an RFC 3339 time ({e})")))
        })
        .transpose()
}

/// A parsed report request.
struct Request {
    tenant: TenantId,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group: UsageGroup,
}

fn parse(tenant: &str, query: &UsageQuery) -> Result<Request, ApiError> {
    let tenant = TenantId::parse(tenant)?;
    let now = Utc::now();
    let month_start = store::day_start(now.date_naive().with_day(1).expect("the first"));
    let from = time("from", &query.from)?.unwrap_or(month_start);
    let to = time("to", &query.to)?.unwrap_or(now);
    if to <= from {
        return Err(ApiError::bad_request("to", "must be after from"));
    }
    if (to - from).num_days() > MAX_DAYS {
        return Err(ApiError::bad_request("to", format!("must be at most {MAX_DAYS} days after from")));
    }
    let group = match query.group.as_deref() {
        None | Some("day") => UsageGroup::Day,
        Some("model") => UsageGroup::Model,
        Some(_) => return Err(ApiError::bad_request("group", "must be day or model")),
    };
    Ok(Request { tenant, from, to, group })
}

async fn report(state: &AppState, tenant: &str, query: &UsageQuery) -> Result<UsageReport, ApiError> {
    let r = parse(tenant, query)?;
    if !store::tenant_exists(&state.db, &r.tenant).await? {
        return Err(ApiError::NotFound(format!("unknown tenant {:?}", r.tenant.as_str())));
    }
    let rows = store::report(&state.db, &r.tenant, r.from, r.to, r.group).await?;
    let mut total = UsageRow {
        key: "total".into(),
        settled: 0,
        released: 0,
        expired: 0,
        tokens: 0,
        plan_tokens: 0,
        grant_tokens: 0,
        reserved: 0,
    };
    for row in &rows {
        total.settled += row.settled;
        total.released += row.released;
        total.expired += row.expired;
        total.tokens += row.tokens;
        total.plan_tokens += row.plan_tokens;
        total.grant_tokens += row.grant_tokens;
        total.reserved += row.reserved;
    }
    Ok(UsageReport {
        tenant: r.tenant.as_str().to_owned(),
        from: r.from.to_rfc3339(),
        to: r.to.to_rfc3339(),
        group: r.group,
        rows,
        total,
    })
}

/// `GET /api/v1/tenants/{tenant}/usage?from=&to=&group=day|model` → the tenant's use from
/// the usage ledger, per UTC day or per model.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant"), UsageQuery),
    responses(
        (status = 200, description = "The tenant's use per group, from the usage ledger (what Redis has drained into it: seconds behind)", body = UsageReport),
        (status = 400, description = "A malformed tenant name or query parameter, naming it: `from`/`to` not RFC 3339, `to` not after `from` or more than 400 days later, an unknown `group`, an unknown parameter", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants/{tenant}/usage")]
pub async fn usage(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<UsageQuery>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(report(&state, &path, &query).await?))
}

/// `GET /api/v1/tenants/{tenant}/usage.csv?from=&to=&group=` → the same report as CSV.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant"), UsageQuery),
    responses(
        (status = 200, description = "One line per group, then the total (an attachment, `usage-<tenant>.csv`)", body = String, content_type = "text/csv"),
        (status = 400, description = "A malformed tenant name or query parameter, naming it", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants/{tenant}/usage.csv")]
pub async fn usage_csv(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<UsageQuery>,
) -> Result<HttpResponse, ApiError> {
    let report = report(&state, &path, &query).await?;
    let mut csv = String::from("key,settled,released,expired,tokens,plan_tokens,grant_tokens,reserved\n");
    for row in report.rows.iter().chain(std::iter::once(&report.total)) {
        // Keys are days, model names or "total". A model name is quoted (quotes doubled),
        // and one a spreadsheet would read as a formula is prefixed with an apostrophe.
        let mut key = row.key.clone();
        if key.starts_with(['=', '+', '-', '@', '\t', '\r']) {
            key.insert(0, '\'');
        }
        if key.contains([',', '"', '\n', '\r']) {
            key = format!("\"{}\"", key.replace('"', "\"\""));
        }
        csv.push_str(&format!(
            "{key},{},{},{},{},{},{},{}\n",
            row.settled, row.released, row.expired, row.tokens, row.plan_tokens, row.grant_tokens, row.reserved
        ));
    }
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header(("content-disposition", format!("attachment; filename=\"usage-{}.csv\"", report.tenant)))
        .body(csv))
}
