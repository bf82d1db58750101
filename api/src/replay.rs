//! The reply of traffic replay (`POST /api/v1/pools/{pool}/replay`, `tessera replay`): the
//! draws a pool really served in a period, run through a candidate configuration, measured
//! per member and as a sequence beside what actually happened.

use serde::{Deserialize, Serialize};

/// The most draws one replay over HTTP reads (a longer period: a shorter one, or the
/// command line `tessera replay`, which has no such bound).
pub const MAX_HTTP_DRAWS: u64 = 2_000_000;

/// The most steps one replay over HTTP takes (`engine::replay::replay_within`: a ticket
/// taken, a member visited for each ticket built: about 4 ns each in a release build, by
/// `cargo bench -p engine --bench replay`). Replaying 2,000,000 draws of a pool of 3
/// members takes about 10,000,000 steps, of 30 members about 64,000,000; the bound is about
/// 2 s. A candidate of thousands of members, or caps that make every draw skip tickets,
/// take far more and are refused before the work is done.
pub const MAX_HTTP_STEPS: u64 = 500_000_000;

/// The default and the largest window (in tickets) of a replay's window deviation.
pub const DEFAULT_WINDOW: usize = 100;
pub const MAX_WINDOW: usize = 100_000;

/// One member in a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct MemberReplay {
    /// The channel (or member) code.
    pub member: String,
    /// Its share by the candidate's weights (no caps, no peaks), 0..=1.
    pub expected_share: f64,
    /// Its draws in the period as recorded, and their share of all draws.
    pub recorded_draws: u64,
    pub recorded_share: f64,
    /// Its draws when the recorded demand runs through the candidate, and their share.
    pub replayed_draws: u64,
    pub replayed_share: f64,
    /// Tickets of it the replay skipped at a daily or short-window cap.
    pub cap_hits: u64,
    /// Its recorded outcomes in the period (successes over reports); null when none were
    /// reported.
    pub success_rate: Option<f64>,
    /// How many outcomes were reported for it in the period.
    pub outcomes: u64,
}

/// One sequence of draws (the recorded one, or the replayed one), measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SequenceSummary {
    pub draws: u64,
    /// The success rate its shares would get from the recorded outcomes (over the members
    /// with outcomes); null when no member has any.
    pub expected_success_rate: Option<f64>,
    /// The largest deviation of a member's count in any window of `window` tickets from the
    /// candidate's share of it.
    pub max_window_deviation: f64,
    /// The longest run of one member, and that member (null with no draws).
    pub longest_run: u64,
    pub longest_run_member: Option<String>,
}

/// A replay's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReplayReport {
    pub pool: String,
    /// The period replayed (RFC 3339): draw-log minutes from `from` (inclusive) to `to`.
    pub from: String,
    pub to: String,
    /// Minutes with draws in the period.
    pub minutes: u64,
    /// Tickets in a window of the window deviation.
    pub window: u64,
    /// What the recorded demand ran through: `published` (the pool as published now),
    /// `weights` (as published now, with the weights given) or `candidate` (a whole pool
    /// body).
    pub through: String,
    /// The published version the candidate starts from; null for a whole candidate body.
    pub config_version: Option<u64>,
    /// Every member either sequence names: the candidate's first, in its order.
    pub members: Vec<MemberReplay>,
    pub recorded: SequenceSummary,
    pub replayed: SequenceSummary,
    /// Batches the replay built.
    pub batches: u64,
    /// Draws the replay could not serve (every ticket it looked at was capped).
    pub refused: u64,
}
