//! The state of the dependencies, as `/readyz` and the dashboard report it.

use serde::{Deserialize, Serialize};

/// One dependency as last checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DependencyStatus {
    /// Whether it answered within the check's timeout.
    pub up: bool,
    /// The version it reported, when up.
    pub version: Option<String>,
    /// Why it is considered down, when down.
    pub error: Option<String>,
}

/// What the dashboard reports.
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

/// `GET /healthz`: the process is alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Alive {
    /// Always `alive`.
    pub status: String,
}

/// One dependency in `/readyz`: `up` with its version, or `down` with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Dependency {
    /// `up` or `down`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&DependencyStatus> for Dependency {
    fn from(d: &DependencyStatus) -> Self {
        if d.up {
            Self { status: "up".into(), version: d.version.clone(), error: None }
        } else {
            Self { status: "down".into(), version: None, error: d.error.clone() }
        }
    }
}

/// `GET /readyz` (public): ready or not, and nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Ready {
    /// `ready` or `unavailable`.
    pub status: String,
}

/// `GET /readyz/details` (operators): ready, or unavailable naming what is down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// `ready` or `unavailable`.
    pub status: String,
    /// The dependencies that are down (`postgres`, `redis`).
    pub down: Vec<String>,
    pub postgres: Dependency,
    pub redis: Dependency,
}

impl Readiness {
    /// The reply for two checked dependencies.
    pub fn of(postgres: &DependencyStatus, redis: &DependencyStatus) -> Self {
        let down: Vec<String> = [("postgres", postgres), ("redis", redis)]
            .into_iter()
            .filter(|(_, d)| !d.up)
            .map(|(name, _)| name.to_owned())
            .collect();
        Self {
            status: if down.is_empty() { "ready" } else { "unavailable" }.into(),
            down,
            postgres: postgres.into(),
            redis: redis.into(),
        }
    }
}
