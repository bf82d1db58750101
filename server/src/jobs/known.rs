//! The pools and tenants the jobs work on, read from Postgres (the configuration's truth)
//! instead of scanning Redis: a `SCAN` of the keyspace every second costs Redis time in
//! proportion to every key it holds, and it cannot see a pool or tenant whose keys a wipe
//! removed. When Postgres does not answer within [`LIST_WITHIN`], the last list read is
//! used, so pools keep being refilled while the configuration store is away.

use std::sync::Mutex;
use std::time::Duration;

use client::pool::PoolName;
use client::quota::TenantId;

use crate::state::AppState;

/// How long a job waits for the list before it uses the last one.
pub const LIST_WITHIN: Duration = Duration::from_millis(500);

/// Every pool in the configuration or published, or the last list read when Postgres is away.
pub async fn pools(state: &AppState) -> Vec<PoolName> {
    let read = crate::pools::store::pool_names(&state.db);
    refresh("pools", read, &state.known.pools, |n| PoolName::parse(n).ok()).await
}

/// Every tenant in the configuration or published, or the last list read when Postgres is away.
pub async fn tenants(state: &AppState) -> Vec<TenantId> {
    let read = crate::tenants::store::tenant_names(&state.db);
    refresh("tenants", read, &state.known.tenants, |n| TenantId::parse(n).ok()).await
}

/// Reads the names within [`LIST_WITHIN`] into `last`, or keeps `last` (saying why) when
/// Postgres fails or is too slow; answers the list.
async fn refresh<T: Clone>(
    what: &str,
    read: impl std::future::Future<Output = Result<Vec<String>, sqlx::Error>>,
    last: &Mutex<Vec<T>>,
    parse: impl Fn(&str) -> Option<T>,
) -> Vec<T> {
    let read = tokio::time::timeout(LIST_WITHIN, read).await;
    let mut last = last.lock().expect("known names");
    match read {
        Ok(Ok(names)) => *last = names.iter().filter_map(|n| parse(n)).collect(),
        Ok(Err(e)) => tracing::warn!(error = %e, "listing {what} failed; using the last list"),
        Err(_) => tracing::warn!(within = ?LIST_WITHIN, "listing {what} timed out; using the last list"),
    }
    last.clone()
}
