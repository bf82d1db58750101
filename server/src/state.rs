//! The state every request handler, server function and job shares.

use std::sync::Arc;

use client::Keys;
use redis::aio::ConnectionManager;
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::metrics::Metrics;

/// Cheap to clone: everything inside is shared.
#[derive(Clone)]
pub struct AppState {
    /// The Postgres pool (the configuration's truth).
    pub db: PgPool,
    /// The Redis connection (the hot path), opened on first use.
    pub redis: RedisHandle,
    /// Every Redis key name, under the configured prefix.
    pub keys: Keys,
    /// The Prometheus registry served at `/metrics`.
    pub metrics: Metrics,
}

/// A Redis connection opened on first use. The server starts (and reports "redis down" on
/// `/readyz`) while Redis is unreachable, and connects as soon as Redis answers.
#[derive(Clone)]
pub struct RedisHandle {
    client: redis::Client,
    timeouts: client::RedisTimeouts,
    manager: Arc<Mutex<Option<ConnectionManager>>>,
}

impl RedisHandle {
    /// A handle that has not connected yet.
    pub fn new(client: redis::Client, timeouts: client::RedisTimeouts) -> Self {
        Self { client, timeouts, manager: Arc::new(Mutex::new(None)) }
    }

    /// The shared connection, opening it when there is none yet. Once open, the
    /// connection manager reconnects by itself after Redis restarts.
    pub async fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let mut guard = self.manager.lock().await;
        if let Some(manager) = guard.as_ref() {
            return Ok(manager.clone());
        }
        let manager = client::connect(&self.client, self.timeouts).await?;
        *guard = Some(manager.clone());
        Ok(manager)
    }
}
