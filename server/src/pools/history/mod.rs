//! A pool's configuration history and restoring an earlier version.

pub mod routes;
pub mod store;
