//! The audit trail: append-only and hash-chained, each row signed with a key kept outside
//! the database ([`key`], [`store`]) and checked by the server itself ([`chain`]); listed,
//! verified and exported over HTTP ([`routes`]); an export checked offline ([`csv`]).

pub mod chain;
pub mod csv;
pub mod key;
pub mod routes;
pub mod store;
