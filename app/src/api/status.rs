//! The system status the dashboard shows: dependencies and the newest snapshot.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// One dependency as last checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyStatus {
    /// Whether it answered within the check's timeout.
    pub up: bool,
    /// The version it reported, when up.
    pub version: Option<String>,
    /// Why it is considered down, when down.
    pub error: Option<String>,
}

/// What `/readyz` and the dashboard report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemStatus {
    /// The configuration store.
    pub postgres: DependencyStatus,
    /// The data plane's store.
    pub redis: DependencyStatus,
    /// The highest snapshot version stored in Postgres (none before the first change).
    pub snapshot_version: Option<i64>,
    /// How many snapshots are stored.
    pub snapshot_count: i64,
    /// The Redis key prefix this deployment writes under.
    pub redis_prefix: String,
    /// When the check ran (RFC 3339, server clock).
    pub checked_at: String,
}

impl SystemStatus {
    /// Ready when every dependency is up.
    pub fn ready(&self) -> bool {
        self.postgres.up && self.redis.up
    }
}

/// The current system status, checked now, for any signed-in user. A GET: reads carry no
/// CSRF token, and the server refuses session writes without one.
#[server(prefix = "/sfn", endpoint = "system_status", input = GetUrl)]
pub async fn get_system_status() -> Result<SystemStatus, ServerFnError> {
    super::session::ssr::require_session().await?;
    Ok(super::backend()?.system_status().await)
}
