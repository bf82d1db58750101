//! HTTP handlers, one module per resource.

pub mod audit;
pub mod health;
pub mod metrics;
pub mod pool;
pub mod quota;
