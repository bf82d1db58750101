//! One module per page.

pub mod audit;
pub mod channels;
pub mod dashboard;
pub mod login;
pub mod not_found;
pub mod pools;
pub mod tenants;
