//! The `tessera` server: configuration, the HTTP API, the Leptos SSR host, the Postgres
//! store, the jobs and the command line. ARCHITECTURE.md at the repository root maps every
//! route to its module, store, Lua script and job.
//!
//! Six layers, each importing only from itself and below (ARCHITECTURE.md, checked by
//! `architecture.rs`): foundations ([`error`], [`batch`], [`inputs`], [`schema`], [`configuration`],
//! [`telemetry`], [`store`], [`metrics`], [`security_headers`], [`throttle`], [`state`]);
//! the change every write goes through ([`change`], [`audit`], [`gate`]: approval policies
//! and break-glass flags); resources ([`access`], [`channels`], [`pools`], [`plans`],
//! [`tenants`] with grants, [`routing`]); services over them ([`publish`], [`health`],
//! [`tiers`], [`usage`], [`samples`], [`draws`], [`quota`], [`probes`]); workflows
//! ([`approvals`], [`ramps`], [`adopt`]); delivery ([`http`] and every `routes.rs`, [`jobs`]
//! (one module per scheduled job, named by its id), [`backend`] (what the UI's server
//! functions call), [`startup`], [`openapi`], [`reference`], and the command line: [`cli`],
//! [`seed`], [`simulate`], [`bench`]). A resource folder holds `routes.rs` (HTTP only:
//! parse, authorize, call down) and `store.rs` (its SQL, and the only SQL).
#![forbid(unsafe_code)]

pub mod access;
pub mod adopt;
pub(crate) mod approvals;
pub mod audit;
pub(crate) mod backend;
pub mod batch;
pub mod bench;
pub mod change;
pub mod channels;
pub mod cli;
pub mod configuration;
pub mod draws;
pub mod error;
pub mod gate;
pub mod health;
pub(crate) mod http;
pub mod inputs;
pub mod jobs;
pub mod metrics;
pub(crate) mod openapi;
pub mod plans;
pub mod pools;
pub(crate) mod probes;
pub mod publish;
pub(crate) mod quota;
pub(crate) mod ramps;
pub(crate) mod reference;
pub(crate) mod routing;
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
pub mod throttle;
pub mod tiers;
pub mod usage;

#[cfg(test)]
mod architecture;
