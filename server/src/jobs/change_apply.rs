//! Job `change_apply`: applies the change requests scheduled for now or earlier, each as
//! `POST /api/v1/changes/{id}/apply` would (audited with source `schedule`, in the name of
//! who scheduled it); a request whose pool changed since it was made is suspended, saying
//! why, and the others still run. Then it expires the open requests past their expiry
//! (audited as `change.expire` by `change_apply`), so the list says what can still happen.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::audit::store::Source;
use crate::change::Ctx;
use crate::state::AppState;

/// Every 10 seconds.
pub const CRON: &str = "*/10 * * * * *";

/// What one run did.
#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    /// The requests applied.
    pub applied: Vec<i64>,
    /// The requests not applied (suspended, expired, short of approvals), and why.
    pub refused: Vec<(i64, String)>,
    /// The open requests that expired.
    pub expired: Vec<i64>,
}

/// One run, at `now` (tests pass their own clock).
pub async fn run_once(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    for (id, scheduled_by) in crate::approvals::schedule::store::due_requests(&state.db, now).await? {
        let ctx = Ctx { actor: &scheduled_by, source: Source::Schedule, reason: None, request_id: None };
        match crate::approvals::store::apply_request(state, &ctx, id, Some(now)).await {
            Ok((_, written)) => {
                let published = crate::publish::publish_now(state).await;
                if let Some((pool, written, mode)) = written {
                    if published {
                        crate::publish::rebuild_if_needed(state, &pool, &written.published, mode).await;
                    }
                }
                tracing::info!(id, "applied a scheduled change request");
                outcome.applied.push(id);
            }
            Err(e) => {
                tracing::warn!(id, error = %e, "a scheduled change request was not applied");
                // The pool cannot take it any more: suspended, so it is not tried every run.
                if matches!(e, crate::error::ApiError::Unprocessable { .. }) {
                    crate::approvals::schedule::store::suspend_request(&state.db, &ctx, id, &e.to_string()).await?;
                }
                outcome.refused.push((id, e.to_string()));
            }
        }
    }
    let ctx = Ctx { actor: "change_apply", source: Source::Schedule, reason: None, request_id: None };
    outcome.expired = crate::approvals::schedule::store::expire_due(&state.db, &ctx, now).await?;
    Ok(outcome)
}
