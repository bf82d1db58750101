//! The dead-letter list: operations a process kept for Redis in its quota journal whose
//! tenant does not exist here (a journal carried over from another deployment, a database
//! restored without the tenant). Replaying them can never succeed, so each instance sets
//! them aside into Postgres — written there first, then taken out of the journal: nothing
//! is lost between the two — and the usage API shows them
//! (`GET /api/v1/usage/dead_letters`).

pub mod routes;
pub mod store;

use anyhow::Context;

use crate::state::AppState;
pub use store::DeadLetter;

/// Sets aside what the journal holds for tenants that do not exist; returns how many
/// operations were taken out of the journal.
pub async fn set_aside_unknown(state: &AppState) -> anyhow::Result<usize> {
    let waiting = state.quotas.waiting();
    if waiting.is_empty() {
        return Ok(0);
    }
    let mut names: Vec<String> = waiting.iter().map(|w| w.tenant.to_string()).collect();
    names.sort();
    names.dedup();
    let known = store::existing_tenants(&state.db, &names).await.context("reading the tenants")?;
    let gone: Vec<_> = waiting.into_iter().filter(|w| !known.iter().any(|k| k == w.tenant.as_str())).collect();
    if gone.is_empty() {
        return Ok(0);
    }
    let journal = state.quotas.journal_path().map_or_else(|| "(memory)".to_owned(), |p| p.display().to_string());
    store::insert(&state.db, &gone, &journal).await.context("writing the dead-letter list")?;
    let taken = state.quotas.set_aside(&gone).await.context("taking them out of the quota journal")?;
    tracing::warn!(
        operations = taken,
        "quota operations of tenants that do not exist set aside to the dead-letter list"
    );
    Ok(taken)
}
