//! The ramp webhook: notifications are queued in the transaction of what they announce
//! (table `notification`) and delivered by the `notify` job as Slack-compatible JSON
//! (`{"text", …}` with the event's facts beside it; `id` lets a receiver drop a repeat).
//! A failed delivery is tried again after 2, 4, 8, … seconds (at most 5 minutes apart),
//! up to [`MAX_ATTEMPTS`] times; the ramp never waits for it.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::state::AppState;

/// Attempts before a notification is given up (kept, marked failed).
pub const MAX_ATTEMPTS: i32 = 20;
/// How long one delivery may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A message's text as Slack-compatible receivers take it literally: `&`, `<` and `>`
/// escaped, so a reason typed by a person cannot ping a channel (`<!channel>`) or dress up
/// a link (`<https://…|text>`).
pub fn escape_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The wait before attempt `attempts + 1`.
pub fn backoff(attempts: i32) -> TimeDelta {
    TimeDelta::seconds((1i64 << attempts.clamp(1, 9)).min(300))
}

/// Delivers what is due at `now`; answers (delivered, failed attempts).
pub async fn deliver_due(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<(usize, usize)> {
    let Some(url) = state.ramps.webhook_url.clone() else { return Ok((0, 0)) };
    let delivered_failed = deliver(state, url, now).await;
    let pending = super::store::pending_notifications(&state.db).await?;
    state.metrics.watch.notifications_pending.set(pending);
    delivered_failed
}

/// One delivery run: what is due, claimed, sent and marked.
async fn deliver(state: &AppState, url: reqwest::Url, now: DateTime<Utc>) -> anyhow::Result<(usize, usize)> {
    // Leased for longer than a run of 50 deliveries can take.
    let due = super::store::claim_notifications(&state.db, now, 50, 50 * TIMEOUT.as_secs() as i64 + 60).await?;
    if due.is_empty() {
        return Ok((0, 0));
    }
    // No redirects: the configured receiver answers, nobody it points to.
    let http = reqwest::Client::builder().timeout(TIMEOUT).redirect(reqwest::redirect::Policy::none()).build()?;
    let (mut delivered, mut failed) = (0, 0);
    for (id, event, body, attempts) in due {
        let sent = http.post(url.clone()).json(&body).send().await;
        let error = match sent {
            Ok(reply) if reply.status().is_success() => None,
            Ok(reply) => Some(format!("the webhook answered {}", reply.status())),
            // Without the URL: it may hold the receiver's secret.
            Err(e) => Some(format!("the webhook did not answer: {}", e.without_url())),
        };
        match error {
            None => {
                super::store::mark_delivered(&state.db, id, now).await?;
                delivered += 1;
            }
            Some(error) => {
                let attempts = attempts + 1;
                let next = (attempts < MAX_ATTEMPTS).then(|| now + backoff(attempts));
                tracing::warn!(notification = id, event, attempts, error, "a ramp notification was not delivered");
                super::store::mark_failed(&state.db, id, &error, now, next).await?;
                state.metrics.watch.notification_failures.inc();
                failed += 1;
            }
        }
    }
    Ok((delivered, failed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_text_cannot_ping_or_link() {
        assert_eq!(super::escape_text("a <!channel> & <https://x|y>"), "a &lt;!channel&gt; &amp; &lt;https://x|y&gt;");
    }
}
