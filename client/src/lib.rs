//! Tessera's data-plane library: what an application embeds to talk to the pools and quotas
//! kept in Redis (see `DESIGN.md` §3–4).
//!
//! Layout:
//! - [`keys`]: every Redis key name, built from one configured prefix with per-pool and
//!   per-tenant hash tags, so that each script touches one Redis Cluster slot.
//! - [`connection`]: a reconnecting Redis connection with bounded timeouts.
#![forbid(unsafe_code)]

pub mod connection;
pub mod keys;

pub use connection::{connect, RedisTimeouts};
pub use keys::{KeyPrefix, KeyPrefixError, Keys};
