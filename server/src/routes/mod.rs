//! HTTP handlers, one module per resource.

pub mod admin;
pub mod audit;
pub mod auth;
pub mod channel_health;
pub mod config;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod outcomes;
pub mod pool;
pub mod quota;
pub mod samples;
