//! Approval policies: where they apply, a pool changes only through change requests.

pub mod store;
