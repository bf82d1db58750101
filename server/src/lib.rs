//! The `tessera` server: configuration, HTTP API, the Leptos SSR host, the Postgres store,
//! and the command line (see `DESIGN.md` §2).
//!
//! Layout: [`configuration`] and [`telemetry`] set the process up; [`startup`] builds the
//! application from [`state`]; [`routes`] hold the HTTP handlers; [`db`] the repository
//! functions; [`status`] the readiness check; [`cli`] and [`seed`] the subcommands;
//! [`error`] the one HTTP error type; [`scheduler`] the leader-elected jobs; [`bench`] the
//! `tessera bench` measurements; [`simulate`] the `tessera simulate` traffic; [`backend`] what
//! the UI's server functions call; [`openapi`]
//! the OpenAPI document of the HTTP API.
#![forbid(unsafe_code)]

pub mod auth;
pub mod backend;
pub mod bench;
pub mod cli;
pub mod configuration;
pub mod db;
pub mod error;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod publish;
pub mod routes;
pub mod scheduler;
pub mod seed;
pub mod simulate;
pub mod startup;
pub mod state;
pub mod status;
pub mod telemetry;
