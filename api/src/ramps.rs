//! The replies of ramps (`/api/v1/ramps…`, `/api/v1/pools/{pool}/ramps`): staged gray
//! releases of a pool's weights, guarded by the channels' outcomes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a ramp is. One definition: the server stores, selects and reports these names,
/// and the UI decides on them (the `ramp.state` check constraint lists the same five).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum RampState {
    /// Evaluated every 10 s: it advances, holds, pauses, steps back or aborts.
    Running,
    /// Held where it is (by a person, a breach or no data) until resumed or aborted.
    Paused,
    /// A gradual abort under way, back to the baseline.
    Aborting,
    /// It reached its target.
    Completed,
    /// It is back at its baseline.
    Aborted,
}

impl RampState {
    pub const ALL: [RampState; 5] =
        [RampState::Running, RampState::Paused, RampState::Aborting, RampState::Completed, RampState::Aborted];
    /// The states of a ramp still under way (one per pool at most).
    pub const LIVE: [RampState; 3] = [RampState::Running, RampState::Paused, RampState::Aborting];

    pub fn as_str(self) -> &'static str {
        match self {
            RampState::Running => "running",
            RampState::Paused => "paused",
            RampState::Aborting => "aborting",
            RampState::Completed => "completed",
            RampState::Aborted => "aborted",
        }
    }

    /// Whether the ramp is still under way.
    pub fn is_live(self) -> bool {
        Self::LIVE.contains(&self)
    }

    /// The names of `states`, as SQL binds them (`state = any($1)`).
    pub fn names(states: &[RampState]) -> Vec<&'static str> {
        states.iter().map(|s| s.as_str()).collect()
    }
}

impl std::fmt::Display for RampState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for RampState {
    type Error = UnknownRampState;

    fn try_from(name: String) -> Result<Self, UnknownRampState> {
        Self::ALL.into_iter().find(|s| s.as_str() == name).ok_or(UnknownRampState(name))
    }
}

/// A stored state that is none of [`RampState`]'s names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRampState(pub String);

impl std::fmt::Display for UnknownRampState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} is not a ramp state (running, paused, aborting, completed or aborted)", self.0)
    }
}

impl std::error::Error for UnknownRampState {}

/// A ramp in a list: where it is and since when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampSummary {
    pub id: i64,
    pub pool: String,
    pub state: RampState,
    /// The step in force: 0 is the baseline, `steps` the target.
    pub step: i32,
    /// Steps in the plan, the target included.
    pub steps: i32,
    /// The members the ramp grows (the canary) and their share now (percent).
    pub canary: Vec<String>,
    pub canary_share: f64,
    /// When the step in force started (RFC 3339).
    pub step_started_at: String,
    pub created_by: String,
    pub reason: String,
    pub created_at: String,
    pub ended_at: Option<String>,
    /// The change request that approved it, if one did.
    pub change_request: Option<i64>,
}

/// `GET /api/v1/ramps`, `GET /api/v1/pools/{pool}/ramps`: newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampList {
    pub ramps: Vec<RampSummary>,
}

/// One step of a ramp's timeline, planned and actual.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampStep {
    /// 1..=steps (0, the baseline, is not listed).
    pub index: i32,
    /// Member → weight.
    pub weights: BTreeMap<String, u64>,
    /// The canary's share in this step (percent).
    pub canary_share: f64,
    /// `600 s`, `until 2026-12-02T10:00:00Z`, `manual`, or `target` (the last step).
    pub hold: String,
    pub min_draws: u64,
    /// When it is expected to start, if every hold before it is a duration (RFC 3339).
    pub planned_at: Option<String>,
    /// When it started (its latest start, if it was entered more than once).
    pub started_at: Option<String>,
}

/// Something a ramp did, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampEvent {
    pub id: i64,
    pub at: String,
    /// `start`, `step`, `breach`, `pause`, `resume`, `step_back`, `abort`, `aborted`,
    /// `complete`, `dry_run`, `hold`.
    pub kind: String,
    pub step: i32,
    pub actor: String,
    /// One sentence of why.
    pub sentence: String,
    /// What was measured (per guard: its verdict, value, limit and samples).
    pub measured: Option<Value>,
    /// The audit row it wrote, if any.
    pub audit_id: Option<i64>,
}

/// One evaluation's measurements, for the guard charts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampSample {
    pub at: String,
    pub step: i32,
    /// Per member: `{"ok","fail","success_rate"}` over the first guard's window.
    pub members: BTreeMap<String, Value>,
    /// Per guard: `{"verdict","value"?,"limit"?,"samples"?}`.
    pub guards: Vec<Value>,
}

/// `GET /api/v1/ramps/{id}`: the ramp, its plan's steps with their times, the guards in
/// words, its events (oldest first) and its last evaluations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampDetail {
    pub ramp: RampSummary,
    pub baseline: BTreeMap<String, u64>,
    pub steps: Vec<RampStep>,
    /// Each guard in words, e.g. `success rate ≥ 95% (5 min, ≥ 100 outcomes)`.
    pub guards: Vec<String>,
    /// Each guard's threshold as a fraction or ms, for the charts (absolute ones only).
    pub thresholds: Vec<Option<f64>>,
    /// `pause`, `step_back` or `abort`.
    pub on_breach: String,
    pub abort_seconds: u64,
    /// `drain` or `immediate`.
    pub mode: String,
    pub hold_in_peaks: bool,
    /// Why the step in force is held now, if it is (a guard short of samples, draws short
    /// of the minimum, a peak window, a manual hold).
    pub held: Option<String>,
    pub events: Vec<RampEvent>,
    pub samples: Vec<RampSample>,
    /// The pool's configuration version (the next control's or edit's `expected_version`).
    pub pool_version: i64,
}

/// What a control or a new ramp answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RampWriteReply {
    pub ramp: RampSummary,
    /// The pool's configuration version after it, when it wrote one.
    pub version: Option<i64>,
    /// Whether Redis has the new version yet (the outbox delivers it otherwise).
    pub published: bool,
}
