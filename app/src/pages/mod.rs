//! One module per page.

pub mod audit;
pub mod dashboard;
pub mod login;
pub mod not_found;
pub mod pending;
pub mod pools;
