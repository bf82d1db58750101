//! The audit trail: append-only and hash-chained ([`store`]); listed, verified and exported
//! over HTTP ([`routes`]).

pub mod routes;
pub mod store;
