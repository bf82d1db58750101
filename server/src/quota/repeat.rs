//! Repeated calls answered from the usage ledger. Redis keeps a finished reservation's done
//! marker for the tenant's idempotency window only (an hour by default); the ledger in
//! Postgres holds every outcome for the tenant's retention. So a repeated reserve, settle
//! or release of a request id finished within the retention gets the reply it got first,
//! whenever it comes:
//! - a reserve asks the ledger before Redis (batched with every reserve asked meanwhile:
//!   one query, not one each); when Postgres is slow or away the reserve goes on without
//!   it (after 250 ms; at once for 5 s after a failed or timed-out look-up), counted in
//!   `tessera_quota_ledger_lookups_total{result="failed"}`. Once the ledger holds a
//!   finished request (about a second after it finished), a repeated reserve is answered
//!   from it, also within the window (`source: "ledger"`);
//! - a settle or release asks the ledger only when Redis does not know the request id. A
//!   settle of a reservation the sweeper returned is charged late, as within the window.

use std::time::Duration;

use client::quota::{Earlier, QuotaError, ReleaseOutcome, RequestId, Reservation, SettleOutcome, TenantId, TokenCount};

use crate::batch::LookupError;
use crate::error::ApiError;
use crate::state::AppState;

/// How long a reserve waits for the ledger before going on without it.
pub const RESERVE_LOOKUP_TIMEOUT: Duration = Duration::from_millis(250);
/// How long a settle or release that Redis does not know waits for the ledger (it cannot
/// answer without it: 503 after this).
pub const UNKNOWN_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// `must_answer`: the caller cannot go on without the ledger (a settle or release Redis
/// does not know), so it asks even while look-ups cool down after a failure.
async fn look_up(
    state: &AppState,
    operation: &str,
    tenant: &TenantId,
    request: &RequestId,
    timeout: Duration,
    must_answer: bool,
) -> Result<Option<Earlier>, LookupError> {
    let key = (tenant.clone(), request.clone());
    let answer =
        if must_answer { state.earlier.get_waiting(key, timeout).await } else { state.earlier.get(key, timeout).await };
    let result = match &answer {
        Ok(Some(_)) => "found",
        Ok(None) => "none",
        Err(_) => "failed",
    };
    state.metrics.quota_ledger_lookups.with_label_values(&[operation, result]).inc();
    answer
}

/// The first reply to a reserve of `request` when the ledger holds it finished; `None`
/// when it does not, or when the ledger could not say in time (the reserve goes on).
pub async fn reserve_from_ledger(state: &AppState, tenant: &TenantId, request: &RequestId) -> Option<Reservation> {
    match look_up(state, "reserve", tenant, request, RESERVE_LOOKUP_TIMEOUT, false).await {
        Ok(found) => found.map(|earlier| earlier.reserve_reply()),
        Err(e) => {
            tracing::warn!(tenant = %tenant, request_id = %request, error = %e, "the usage ledger could not be asked whether this reserve repeats an earlier one");
            None
        }
    }
}

/// A settle Redis did not know: the ledger's answer, a late charge of a reservation the
/// sweeper returned, or `Unknown` when the ledger does not hold the request id either.
pub async fn settle_unknown(
    state: &AppState,
    tenant: &TenantId,
    request: &RequestId,
    actual: TokenCount,
    partial: bool,
) -> Result<SettleOutcome, ApiError> {
    let Some(earlier) =
        look_up(state, "settle", tenant, request, UNKNOWN_LOOKUP_TIMEOUT, true).await.map_err(unavailable)?
    else {
        return Ok(SettleOutcome::Unknown);
    };
    match earlier.settle_reply() {
        Ok(reply) => Ok(reply),
        Err(expired) => state
            .quotas
            .settle_expired(tenant, request, actual, partial, &expired)
            .await
            .map_err(|e: QuotaError| ApiError::from(e)),
    }
}

/// A release Redis did not know: the ledger's answer, or `Unknown`.
pub async fn release_unknown(
    state: &AppState,
    tenant: &TenantId,
    request: &RequestId,
) -> Result<ReleaseOutcome, ApiError> {
    let found = look_up(state, "release", tenant, request, UNKNOWN_LOOKUP_TIMEOUT, true).await.map_err(unavailable)?;
    Ok(found.map_or(ReleaseOutcome::Unknown, |earlier| earlier.release_reply()))
}

fn unavailable(e: LookupError) -> ApiError {
    ApiError::Unavailable(format!(
        "Redis no longer holds this request id and the usage ledger could not be read ({e}): try again"
    ))
}
