//! The `tessera` server: configuration, the HTTP API, the Leptos SSR host, the Postgres
//! store, the jobs and the command line. ARCHITECTURE.md at the repository root maps every
//! route to its module, store, Lua script and job.
//!
//! One folder per resource — [`pools`], [`channels`], [`plans`], [`tenants`] (with grants),
//! [`quota`], [`health`], [`access`] (guard, sessions, tokens, passwords), [`audit`],
//! [`probes`], [`samples`], [`routing`] (routes: rules choosing a request's pool) — each with `routes.rs` (HTTP only: parse, authorize, call down) and
//! `store.rs` (its SQL, and the only SQL). Below the routes: [`http`] (what every route
//! shares), [`security_headers`] (on every response), [`change`] (one audited transaction
//! per change), [`publish`] (snapshots to Redis, keyed by a typed entity), [`error`],
//! [`inputs`], [`schema`]. [`jobs`] holds one
//! module per scheduled job, named by its id. [`startup`] wires it all; [`cli`], [`seed`],
//! [`bench`] and [`simulate`] are the command line; [`backend`] is what the UI's server
//! functions call; [`openapi`] the document.
#![forbid(unsafe_code)]

pub mod access;
pub mod adopt;
pub mod approvals;
pub mod audit;
pub mod backend;
pub mod bench;
pub mod change;
pub mod channels;
pub mod cli;
pub mod configuration;
pub mod draws;
pub mod error;
pub mod health;
pub mod http;
pub mod inputs;
pub mod jobs;
pub mod metrics;
pub mod openapi;
pub mod plans;
pub mod pools;
pub mod probes;
pub mod publish;
pub mod quota;
pub mod ramps;
pub mod reference;
pub mod routing;
pub mod samples;
pub mod schema;
pub mod security_headers;
pub mod seed;
pub mod simulate;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tenants;
pub mod tiers;
pub mod usage;

#[cfg(test)]
mod architecture;
