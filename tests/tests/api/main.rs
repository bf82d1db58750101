//! The HTTP API, the jobs and the server's dependencies, against real Postgres and Redis:
//! one test binary (linking is the slow part), one module per area, so a failure is named
//! `<area>::<test>`.

mod admin_http;
mod alerts;
mod audit_http;
mod auth_http;
mod changes_http;
mod config_http;
mod docs;
mod draw_log;
mod health;
mod health_eval;
mod instances;
mod lists_http;
mod openapi;
mod outcomes_http;
mod pool_http;
mod postgres_down;
mod postgres_sessions;
mod publish;
mod quota_http;
mod ramps_access;
mod ramps_http;
mod recover;
mod redis_restart;
mod routes_http;
mod sampler;
mod security;
mod security_audit;
mod tiers_http;
mod usage_ledger;
