//! Ramps (DESIGN §7): a pool's weights moved from its baseline to a target in steps, each
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

pub use plan::{Hold, OnBreach, Plan, PlanInput, Step};

/// The states a ramp is in: `running`, `paused` (by a person, a breach or no data),
/// `aborting` (a gradual abort under way), `completed`, `aborted`.
pub const LIVE_STATES: [&str; 3] = ["running", "paused", "aborting"];

/// The controls a person may use, and the permission each needs: promote, promote to the
/// end and resume move traffic onto the new path (edit); pause, step back and abort only
/// take it off (halt: operators too).
pub const CONTROLS: [&str; 6] = ["promote", "promote_to_end", "pause", "resume", "step_back", "abort"];

/// Stages a gradual abort walks back through (each a published version).
pub const ABORT_STAGES: u64 = 5;

/// `ramp:<id>`, the entity of a ramp's own audit rows.
pub fn entity(id: i64) -> String {
    format!("ramp:{id}")
}
