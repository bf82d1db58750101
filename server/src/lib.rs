//! The `tessera` server: configuration, HTTP API, the Leptos SSR host, the Postgres store,
//! and the command line (see `DESIGN.md` §2).
//!
//! Layout: [`configuration`] and [`telemetry`] set the process up; [`startup`] builds the
//! application from [`state`]; [`routes`] hold the HTTP handlers; [`db`] the repository
//! functions; [`status`] the readiness check; [`cli`] and [`seed`] the subcommands.
#![forbid(unsafe_code)]

pub mod cli;
pub mod configuration;
pub mod db;
pub mod metrics;
pub mod routes;
pub mod seed;
pub mod startup;
pub mod state;
pub mod status;
pub mod telemetry;
