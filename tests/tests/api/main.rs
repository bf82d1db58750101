//! The HTTP API, the jobs and the server's dependencies, against real Postgres and Redis:
//! one test binary (linking is the slow part), one module per area, so a failure is named
//! `<area>::<test>`.
//!
//! Each module says where it runs: `// cluster` suites run again on a three-primary Redis
//! Cluster (`scripts/test` reads this file for that pass, and fails on a module that says
//! neither), `// single: why` ones on the single Redis only.

mod admin_http; // single: the admin API's writes; the data plane's suites publish the same snapshots
mod alerts; // single: the alert rules and metric names
mod audit_http; // single: the audit trail (Postgres)
mod auth_http; // single: identity and access
mod changes_http; // single: change requests (Postgres)
mod config_http; // single: the configuration API (Postgres)
mod docs; // single: the docs' examples
mod draw_log; // cluster
mod health; // single: probes and metrics
mod health_eval; // cluster
mod instances; // cluster
mod lists_http; // single: the UI's lists (Postgres)
mod openapi; // single: the OpenAPI document
mod outcomes_http; // cluster
mod pool_http; // cluster
mod postgres_down; // single: Postgres cut through a proxy
mod postgres_sessions; // single: Postgres sessions
mod publish; // cluster
mod quota_http; // cluster
mod quota_repeats; // cluster
mod ramps_access; // single: who may control a ramp
mod ramps_http; // cluster
mod recover; // cluster
mod redis_restart; // single: a Redis of its own, restarted
mod routes_http; // cluster
mod sampler; // cluster
mod security; // single: the boundary
mod security_audit; // single: the audit trail's boundary
mod tiers_http; // cluster
mod usage_ledger; // cluster
