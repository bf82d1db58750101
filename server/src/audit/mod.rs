//! The audit trail: append-only and hash-chained, each row signed with a key kept outside
//! the database ([`key`], [`store`]); listed, verified and exported over HTTP ([`routes`]).

pub mod key;
pub mod routes;
pub mod store;
