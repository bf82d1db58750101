//! The state every request handler, server function and job shares.

use client::{Keys, PoolAdmin, Pools, Quotas, RedisHandle};
use sqlx::PgPool;

use crate::metrics::Metrics;

/// Cheap to clone: everything inside is shared.
#[derive(Clone)]
pub struct AppState {
    /// The Postgres pool (the configuration's truth).
    pub db: PgPool,
    /// A few connections of their own for sign-ins, sessions and API tokens, so a flood at
    /// the door cannot take the jobs' and the UI's.
    pub auth_db: PgPool,
    /// Sign-in and unknown-token throttles, per client address and per user name.
    pub door: crate::throttle::Door,
    /// The header a trusted reverse proxy puts the client's address in (none: the peer's
    /// address is the client's).
    pub trusted_proxy_header: Option<String>,
    /// The Redis connection (the hot path), opened on first use, so the server starts
    /// (and reports Redis down on `/readyz`) while Redis is unreachable.
    pub redis: RedisHandle,
    /// Every Redis key name, under the configured prefix.
    pub keys: Keys,
    /// The Prometheus registry served at `/metrics`.
    pub metrics: Metrics,
    /// The quota data plane (reserve / settle / release), recording into `metrics`.
    pub quotas: Quotas,
    /// The pool data plane (draws, with the local / static fallback).
    pub pools: Pools,
    /// The control plane's pool operations (publish, rotate, refill, eject), for jobs.
    pub pool_admin: PoolAdmin,
    /// The route data plane: each route compiled once per published version.
    pub routes: client::Routes,
    /// The control plane's route operations (publish).
    pub route_admin: client::RouteAdmin,
    /// Outcome reports per channel and minute (written by apps, read by the health job).
    pub outcomes: client::Outcomes,
    /// The configured admin token, if any.
    pub admin: Option<crate::configuration::AdminAccess>,
    /// Sessions, and whether the API is open (development only).
    pub auth: crate::configuration::AuthSettings,
    /// How long pool samples are kept (the daily prune deletes older ones).
    pub sample_retention: crate::configuration::SampleRetention,
    /// How long the draw log and the recorded outcomes are kept.
    pub draw_log_retention: crate::configuration::SampleRetention,
    /// The longest recent runs of each pool's draws, as the draw-log drain saw them (the
    /// `tessera_pool_longest_run` gauge).
    pub recent_runs: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, engine::runs::RecentRuns>>>,
    /// The pools and tenants the jobs last read from Postgres.
    pub known: std::sync::Arc<Known>,
    /// Where ramps announce what they do.
    pub ramps: crate::configuration::RampSettings,
    /// Held while a request checks the audit chain: one check at a time per instance.
    pub audit_verify: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// How finished reservations ended, from the usage ledger, batched: the answer to a
    /// repeated reserve, settle or release once Redis no longer holds its done marker.
    pub earlier: crate::batch::Batcher<(client::quota::TenantId, client::quota::RequestId), client::quota::Earlier>,
}

/// The pools and tenants the jobs last read from Postgres (`jobs::known` reads them), shared
/// by every job of a process.
#[derive(Debug, Default)]
pub struct Known {
    pub(crate) pools: std::sync::Mutex<Vec<client::pool::PoolName>>,
    pub(crate) tenants: std::sync::Mutex<Vec<client::quota::TenantId>>,
}
