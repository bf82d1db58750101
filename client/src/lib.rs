//! Tessera's data-plane library: what an application embeds to talk to the pools and quotas
//! kept in Redis (ARCHITECTURE.md maps each route to the scripts it runs).
//!
//! Layout:
//! - [`keys`]: every Redis key name, built from one configured prefix with per-pool and
//!   per-tenant hash tags, so that each script touches one Redis Cluster slot.
//! - [`connection`]: a reconnecting Redis connection with bounded timeouts, to one server or
//!   to a Redis Cluster ([`nodes`]: the one connection type, and what spreads over nodes).
//! - [`scripts`]: one `redis::Script` per file in `lua/` (EVALSHA, reloaded on NOSCRIPT);
//!   the quota scripts as one Redis Functions library (FCALL, reloaded when missing).
//! - [`quota`]: reserve / settle / release of tenant token quotas, with the offline
//!   fallback; [`estimate`] counts a prompt's tokens for a reservation.
//! - [`pool`]: draws from ticket pools with the local / static fallback chain, and the
//!   control plane's pool operations (publish, rotate, refill, eject).
//! - [`route`]: routes: rules on a request's attributes choose the pool it draws from,
//!   compiled once per published version and decided in memory.
//! - [`health`]: outcome reports per channel and minute, read by the health evaluation.
//! - `coalesce`: the one coalescer: concurrent draws of a pool, or reserves and settles of
//!   a tenant, share one script call.
//! - [`clock`]: the one clock of quota decisions (Redis `TIME`) and quota periods.
//! - [`metrics`]: Prometheus metrics the embedding application registers.
#![forbid(unsafe_code)]

pub mod clock;
mod coalesce;
pub mod connection;
pub mod estimate;
pub mod health;
pub mod keys;
pub mod metrics;
pub mod nodes;
pub mod pool;
pub mod quota;
pub mod reply;
pub mod route;
pub mod scripts;

pub use clock::{Clock, Period};
pub use connection::{connect, is_unreachable, must_reconnect, RedisHandle, RedisTarget, RedisTimeouts};
pub use health::Outcomes;
pub use keys::{KeyPrefix, KeyPrefixError, Keys};
pub use metrics::{OutcomeMetrics, PoolMetrics, QuotaMetrics};
pub use nodes::{Node, RedisConnection};
pub use pool::{PoolAdmin, Pools};
pub use quota::Quotas;
pub use route::{RouteAdmin, Routes};

/// A seed for the client's random orderings and names, from the process's hash keys and
/// the time (the `rand` thread RNG feature is not enabled in this crate).
pub(crate) fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    RandomState::new().hash_one((nanos, COUNTER.fetch_add(1, Ordering::Relaxed), std::process::id()))
}
