//! Adopting snapshots written before the configuration tables existed, once, at start
//! ([`store::adopt_snapshots`]).

pub mod store;
