//! A pool's samples over HTTP: list length and per-member shares over time, for charts.

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, TimeDelta, Utc};
use client::pool::PoolName;
use serde::{Deserialize, Serialize};

use super::store::{list_samples, pool_exists};
use crate::error::{ApiError, ErrorBody};
use crate::samples::sampler::PoolSample;
use crate::state::AppState;

/// How far back a request without `since` reaches.
const DEFAULT_SPAN: TimeDelta = TimeDelta::hours(1);
/// Samples per page without `limit`: an hour at one sample every 10 s.
const DEFAULT_LIMIT: u32 = 360;
/// The most samples one page holds (about a day).
const MAX_LIMIT: u32 = 10_000;

/// The query as sent: every parameter a string, parsed one by one so that an error names
/// the parameter.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SamplesQuery {
    /// Only samples taken at or after this time (RFC 3339); default: an hour ago.
    #[param(value_type = Option<String>, format = DateTime)]
    since: Option<String>,
    /// The most samples (the newest), 1..=10000; default 360.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000)]
    limit: Option<String>,
}

/// The validated query.
struct SamplesFilter {
    since: DateTime<Utc>,
    limit: u32,
}

fn parse(query: &SamplesQuery, now: DateTime<Utc>) -> Result<SamplesFilter, ApiError> {
    let since = match &query.since {
        None => now - DEFAULT_SPAN,
        Some(raw) => DateTime::parse_from_rfc3339(raw).map(|t| t.with_timezone(&Utc)).map_err(|e| {
            ApiError::bad_request("since", format!("must be an RFC 3339 time such as 2026-05-01T12:00:00Z ({e})"))
        })?,
    };
    let limit = match &query.limit {
        None => DEFAULT_LIMIT,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| ApiError::bad_request("limit", format!("must be an integer in 1..={MAX_LIMIT}")))?,
    };
    Ok(SamplesFilter { since, limit })
}

/// The reply: the pool's samples oldest first, and every member seen in them (the series
/// a chart draws).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SamplesReply {
    pool: PoolName,
    since: DateTime<Utc>,
    limit: u32,
    /// More samples matched than `limit`: the oldest were left out.
    truncated: bool,
    members: Vec<String>,
    /// Oldest first: `{"taken_at", "version", "day", "tickets", "standby", "length", "tiers",
    /// "window_seconds", "draws", "batches", "members": {name: {"hits", "window_hits", "expected_share",
    /// "actual_share"}}}`.
    #[schema(value_type = Vec<Object>)]
    samples: Vec<PoolSample>,
}

/// `GET /api/v1/pools/{pool}/samples?since=<RFC 3339>&limit=<1..=10000>` → the newest
/// `limit` (default 360) samples taken since `since` (default: an hour ago), oldest first:
/// `{"pool", "since", "limit", "truncated", "members": [..], "samples": [{"taken_at",
/// "version", "day", "tickets", "standby", "length", "tiers", "window_seconds", "draws", "batches",
/// "members": {name: {"hits", "window_hits", "expected_share", "actual_share"}}}]}`.
/// 400 naming the parameter, 404 for a pool without a snapshot.
#[utoipa::path(
    tag = "pool",
    summary = "Lists a pool's samples: list length and per-member shares over time, for charts",
    params(("pool" = PoolName, Path, description = "The pool"), SamplesQuery),
    responses(
        (status = 200, description = "The newest `limit` samples since `since`, oldest first", body = SamplesReply),
        (status = 400, description = "A malformed pool name or parameter, naming it", body = ErrorBody),
        (status = 404, description = "Unknown pool (no snapshot)", body = ErrorBody),
    )
)]
#[get("/api/v1/pools/{pool}/samples")]
pub async fn list_pool_samples(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<SamplesQuery>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let filter = parse(&query, Utc::now())?;
    if !pool_exists(&state.db, &pool).await? {
        return Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    }
    let page = list_samples(&state.db, &pool, filter.since, filter.limit).await?;
    let mut members: Vec<String> = page.samples.iter().flat_map(|s| s.members.keys().cloned()).collect();
    members.sort();
    members.dedup();
    Ok(HttpResponse::Ok().json(SamplesReply {
        pool,
        since: filter.since,
        limit: filter.limit,
        truncated: page.truncated,
        members,
        samples: page.samples,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(since: Option<&str>, limit: Option<&str>) -> SamplesQuery {
        SamplesQuery { since: since.map(str::to_owned), limit: limit.map(str::to_owned) }
    }

    fn field(e: ApiError) -> String {
        match e {
            ApiError::BadRequest { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_the_last_hour_and_360_samples() {
        let now = Utc::now();
        let f = parse(&query(None, None), now).unwrap();
        assert_eq!((f.since, f.limit), (now - TimeDelta::hours(1), 360));
        let f = parse(&query(Some("2026-05-01T12:00:00+08:00"), Some("10000")), now).unwrap();
        assert_eq!((f.since.to_rfc3339(), f.limit), ("2026-05-01T04:00:00+00:00".to_owned(), 10_000));
    }

    #[test]
    fn a_bad_parameter_is_refused_by_name() {
        let now = Utc::now();
        assert_eq!(field(parse(&query(Some("yesterday"), None), now).err().unwrap()), "since");
        for limit in ["0", "10001", "-1", "ten"] {
            assert_eq!(field(parse(&query(None, Some(limit)), now).err().unwrap()), "limit", "{limit}");
        }
    }
}
