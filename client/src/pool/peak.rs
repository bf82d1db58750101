//! Peak windows in force as they open and close: a batch is built with the window in force
//! when it is built, so at a window's start and end the pool's batches must be rebuilt, or
//! the old weights and multiplier would linger until the lists drained (and the sampler's
//! expected share, which switches at once, would show a deviation that is not there).

use super::{PoolAdmin, PoolError, PoolName, PoolSnapshot};

/// The state field holding the window the pool's batches were last built for.
const FIELD: &str = "peak";

/// What the window in force is called in the state hash: its local start and end, or
/// `off` outside every window.
fn window_key(snapshot: &PoolSnapshot, now: chrono::DateTime<chrono::Utc>) -> Result<String, PoolError> {
    let schedule = snapshot.schedule().map_err(PoolError::Invalid)?;
    Ok(schedule.active_at(now).map_or_else(|| "off".to_owned(), |w| format!("{}-{}", w.start(), w.end())))
}

impl PoolAdmin {
    /// Rebuilds a pool's batches when the peak window in force changed since they were
    /// built (a window opened or closed); returns whether it did. The refiller calls this
    /// every second, so a window applies within a second of its start and stops within a
    /// second of its end.
    pub async fn follow_peak(&self, pool: &PoolName) -> Result<bool, PoolError> {
        let p = pool.as_str();
        let (snapshot_json, built_for): (Option<String>, Option<String>) = redis::pipe()
            .cmd("HGET")
            .arg(self.keys.pool_meta(p))
            .arg("snapshot")
            .cmd("HGET")
            .arg(self.keys.pool_state(p))
            .arg(FIELD)
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)?;
        let Some(json) = snapshot_json else { return Ok(false) };
        let snapshot: PoolSnapshot = serde_json::from_str(&json)
            .map_err(|e| PoolError::Protocol { script: "pool meta", detail: e.to_string() })?;
        if snapshot.peak_windows.is_empty() && built_for.as_deref().is_none_or(|k| k == "off") {
            return Ok(false);
        }
        let now = self.now().await?;
        let in_force = window_key(&snapshot, now)?;
        let changed = match built_for {
            // First seen: the batches were built by now's schedule or a moment before.
            None => false,
            Some(key) => key != in_force,
        };
        if changed {
            self.rebuild(pool).await?;
            tracing::info!(pool = %pool, window = in_force, "peak window changed: batches rebuilt");
        }
        redis::cmd("HSET")
            .arg(self.keys.pool_state(p))
            .arg(FIELD)
            .arg(&in_force)
            .query_async::<()>(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)?;
        Ok(changed)
    }
}
