//! HTTP handlers, one module per resource.

pub mod admin;
pub mod audit;
pub mod health;
pub mod metrics;
pub mod pool;
pub mod quota;
