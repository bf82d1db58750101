//! The tenants list (searched, sorted and paged in Postgres; the use read from Redis for
//! the page's rows only) and one tenant's page.

use app::api::tenants::OPEN_LISTED;
use app::api::tenants::{TENANT_PAGE_SIZE, TENANT_SORTS};
use app::api::{BackendError, BucketView, GrantView, TenantList, TenantQuery, TenantRow, TenantUse, TenantView};
use app::api::{DayUsage, OpenView, UsageView};
use chrono::{DateTime, Datelike, TimeZone, Utc};
use client::quota::TenantId;

use super::unavailable;
use crate::state::AppState;
use crate::tenants::store::TenantSort;

/// The page of tenants `query` asks for.
pub(super) async fn list(state: &AppState, query: TenantQuery) -> Result<TenantList, BackendError> {
    let q = super::lists::search(query.q)?;
    let sort_name = super::lists::sort(query.sort, &TENANT_SORTS)?;
    let sort = match sort_name.as_str() {
        "plan" => TenantSort::Plan,
        "tokens" => TenantSort::Tokens,
        "updated" => TenantSort::Updated,
        _ => TenantSort::Name,
    };
    let page = super::lists::page(query.page)?;
    let search = (!q.is_empty()).then_some(q.as_str());
    let (listed, total) = crate::tenants::store::list_tenant_page(
        &state.db,
        search,
        sort,
        i64::from(TENANT_PAGE_SIZE),
        i64::from(page - 1) * i64::from(TENANT_PAGE_SIZE),
    )
    .await
    .map_err(unavailable)?;
    // The use of the page's tenants, read from Redis at once (one script call each).
    let uses = futures::future::join_all(listed.iter().map(|t| tenant_use(state, &t.name))).await;
    let rows = listed
        .into_iter()
        .zip(uses)
        .map(|(t, usage)| TenantRow {
            name: t.name,
            plan: t.plan,
            monthly_tokens: t.monthly_tokens,
            live_grants: t.live_grants,
            version: t.version,
            usage,
        })
        .collect();
    let total = u64::try_from(total).unwrap_or(0);
    let pages = super::lists::pages(total, TENANT_PAGE_SIZE);
    Ok(TenantList { rows, total, page, pages, q, sort: sort_name })
}

async fn tenant_use(state: &AppState, raw: &str) -> Result<TenantUse, String> {
    let name = TenantId::parse(raw).map_err(|_| format!("{raw:?} is a malformed name"))?;
    match state.quotas.usage(&name).await {
        Ok(u) => {
            let live = u.buckets.iter().filter(|b| b.live);
            let (used, reserved, amount) = live.fold((0u64, 0u64, 0u64), |(used, reserved, amount), b| {
                (used.saturating_add(b.used), reserved.saturating_add(b.reserved), amount.saturating_add(b.amount))
            });
            Ok(TenantUse { used, reserved, amount, available: u.available })
        }
        Err(e) => Err(format!("usage unavailable: {e}")),
    }
}

/// Every tenant's usage, as the dashboard's quota overview reads it.
type Overview = Vec<(String, Result<UsageView, String>)>;

/// Above this many tenants the overview is read at most once per [`OVERVIEW_FRESH_FOR`]
/// and shared by the dashboards of that time (one script call per tenant would otherwise
/// run on every dashboard refresh); at or below it, every read is fresh.
const CACHE_ABOVE: usize = 200;

/// How long a large fleet's overview is shown before it is read again.
pub const OVERVIEW_FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// What the admin UI keeps between requests.
#[derive(Default)]
pub struct UiCache {
    /// A large fleet's quota overview and when it was read. The lock is held while it is
    /// read again, so that dashboards arriving meanwhile wait for that one read.
    overview: tokio::sync::Mutex<Option<(std::time::Instant, Overview)>>,
    /// The dashboard's pool samples of the last hour.
    pub(super) samples: super::samples::SampleCache,
}

/// Every tenant's usage now (the dashboard's quota overview): the names in one query, the
/// usage read from Redis 32 tenants at a time; for more than [`CACHE_ABOVE`] tenants, the
/// reading of the last [`OVERVIEW_FRESH_FOR`].
pub(super) async fn usage_of_every_tenant(state: &super::UiBackend) -> Result<Overview, BackendError> {
    let names: Vec<String> = crate::tenants::store::list_tenants(&state.db)
        .await
        .map_err(unavailable)?
        .into_iter()
        .map(|t| t.name)
        .collect();
    if names.len() <= CACHE_ABOVE {
        return Ok(read_usage(state, names).await);
    }
    let mut cached = state.cache.overview.lock().await;
    if let Some((at, overview)) = cached.as_ref() {
        if at.elapsed() < OVERVIEW_FRESH_FOR {
            return Ok(overview.clone());
        }
    }
    let overview = read_usage(state, names).await;
    *cached = Some((std::time::Instant::now(), overview.clone()));
    Ok(overview)
}

async fn read_usage(state: &AppState, names: Vec<String>) -> Overview {
    use futures::StreamExt;
    let read = futures::stream::iter(names)
        .map(|name| async move {
            let usage = match TenantId::parse(&name) {
                Ok(id) => usage_view(state, &id).await,
                Err(_) => Err(format!("{name:?} is a malformed name")),
            };
            (name, usage)
        })
        .buffered(32);
    read.collect().await
}

/// A tenant's usage now as the UI shows it, or why it could not be read.
async fn usage_view(state: &AppState, name: &TenantId) -> Result<UsageView, String> {
    match state.quotas.usage(name).await {
        Ok(u) => Ok(UsageView {
            period: u.period,
            requests_today: u.requests_today,
            daily_requests: u.daily_requests,
            leases: u.leases,
            concurrency: u.concurrency,
            available: u.available,
            buckets: u
                .buckets
                .into_iter()
                .map(|b| BucketView {
                    id: b.id,
                    kind: b.kind,
                    amount: b.amount,
                    used: b.used,
                    reserved: b.reserved,
                    live: b.live,
                })
                .collect(),
        }),
        Err(e) => {
            tracing::warn!(tenant = %name, error = %e, "reading a tenant's quota usage for the UI failed");
            Err(format!("usage unavailable: {e}"))
        }
    }
}

/// One tenant's page: limits, grants, use now and this month's use per day.
pub(super) async fn detail(state: &AppState, raw: String) -> Result<Option<TenantView>, BackendError> {
    let name = TenantId::parse(&raw).map_err(|e| BackendError::invalid("tenant", e))?;
    let Some(t) = crate::tenants::store::get_tenant(&state.db, &name).await.map_err(unavailable)? else {
        return Ok(None);
    };
    let time = |v: &serde_json::Value| {
        v.as_str().map(|raw| match DateTime::parse_from_rfc3339(raw) {
            Ok(t) => t.with_timezone(&Utc).format("%Y-%m-%d %H:%M UTC").to_string(),
            Err(_) => raw.to_owned(),
        })
    };
    let grants = t
        .grants
        .iter()
        .map(|g| GrantView {
            id: g["id"].as_str().unwrap_or_default().to_owned(),
            kind: g["kind"].as_str().unwrap_or_default().to_owned(),
            amount: g["amount"].as_i64().unwrap_or(0),
            priority: g["priority"].as_i64(),
            starts_at: time(&g["starts_at"]),
            expires_at: time(&g["expires_at"]),
            revoked_at: time(&g["revoked_at"]),
        })
        .collect();
    let usage = usage_view(state, &name).await;
    let month = month_usage(state, &name).await;
    let open = match state.quotas.open_reservations(&name, OPEN_LISTED).await {
        Ok(list) => Ok(list
            .into_iter()
            .map(|r| OpenView {
                deadline: Utc
                    .timestamp_millis_opt(r.deadline_ms)
                    .single()
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                    .unwrap_or_else(|| r.deadline_ms.to_string()),
                request: r.request,
                tokens: r.tokens,
                parts: r.parts,
                model: r.model,
            })
            .collect()),
        Err(e) => Err(format!("open reservations unavailable: {e}")),
    };
    let fallback = match t.fallback["policy"].as_str() {
        Some("fail_open_limited") => format!(
            "fail_open_limited, allowance {} tokens",
            app::grouped(t.fallback["allowance"].as_u64().unwrap_or(0))
        ),
        Some(policy) => policy.to_owned(),
        None => "fail_closed".to_owned(),
    };
    Ok(Some(TenantView {
        fallback,
        open,
        month,
        monthly_tokens: t.snapshot["monthly_tokens"].as_i64().unwrap_or(0),
        daily_requests: t.snapshot["daily_requests"].as_i64().unwrap_or(0),
        concurrency: t.snapshot["concurrency"].as_i64().unwrap_or(0),
        name: t.name,
        plan: t.plan,
        version: t.version,
        grants,
        usage,
    }))
}

/// A tenant's use this month per UTC day, from the usage ledger.
async fn month_usage(state: &AppState, tenant: &TenantId) -> Result<Vec<DayUsage>, String> {
    let now = Utc::now();
    let first = now.date_naive().with_day(1).expect("the first");
    let rows = crate::usage::store::report(
        &state.db,
        tenant,
        crate::usage::store::day_start(first),
        now,
        api::tenants::UsageGroup::Day,
    )
    .await
    .map_err(|e| {
        tracing::warn!(tenant = %tenant, error = %e, "reading a tenant's month from the usage ledger failed");
        format!("usage ledger unavailable: {e}")
    })?;
    Ok(rows.into_iter().map(|r| DayUsage { day: r.key, tokens: r.tokens, settled: r.settled }).collect())
}
