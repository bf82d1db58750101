//! Tessera's data-plane library: what an application embeds to talk to the pools and quotas
//! kept in Redis (see `DESIGN.md` §3–4).
//!
//! Layout:
//! - [`keys`]: every Redis key name, built from one configured prefix with per-pool and
//!   per-tenant hash tags, so that each script touches one Redis Cluster slot.
//! - [`connection`]: a reconnecting Redis connection with bounded timeouts.
//! - [`scripts`]: one `redis::Script` per file in `lua/` (EVALSHA, reloaded on NOSCRIPT).
//! - [`quota`]: reserve / settle / release of tenant token quotas, with the offline
//!   fallback; [`estimate`] counts a prompt's tokens for a reservation.
//! - [`clock`]: the one clock of quota decisions (Redis `TIME`) and quota periods.
//! - [`metrics`]: Prometheus metrics the embedding application registers.
#![forbid(unsafe_code)]

pub mod clock;
pub mod connection;
pub mod estimate;
pub mod keys;
pub mod metrics;
pub mod quota;
pub mod scripts;

pub use clock::{Clock, Period};
pub use connection::{connect, is_unreachable, RedisHandle, RedisTimeouts};
pub use metrics::QuotaMetrics;
pub use quota::Quotas;
pub use keys::{KeyPrefix, KeyPrefixError, Keys};
