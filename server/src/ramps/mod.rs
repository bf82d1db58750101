//! Ramps (design.md §7): a pool's weights moved from its baseline to a target in steps, each
//! step an ordinary published version (audited with source `ramp`), advanced by the
//! `ramp_guard` job when its hold has passed, its draws are enough and its guards pass;
//! paused, stepped back or aborted on a breach as the plan says. [`plan`] parses a plan,
//! [`start`] starts one, [`run`] evaluates and acts, [`routes`] is the API, [`store`] its SQL, [`notify`] the
//! webhook.

pub mod control;
pub mod measure;
pub mod notify;
pub mod plan;
pub mod routes;
pub mod run;
pub mod start;
pub mod store;
pub mod view;

pub use plan::PlanInput;

/// Stages a gradual abort walks back through (each a published version).
pub const ABORT_STAGES: u64 = 5;

/// `ramp:<id>`, the entity of a ramp's own audit rows.
pub fn entity(id: i64) -> String {
    format!("ramp:{id}")
}
