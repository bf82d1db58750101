//! The quota data plane over HTTP: reserve, settle, release, read ([`routes`]). The
//! reservation logic lives in `client::quota` and its Lua scripts.

pub mod repeat;
pub mod routes;
