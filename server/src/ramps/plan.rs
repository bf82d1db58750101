//! A ramp plan as written (`PlanInput`: the body of `POST /api/v1/pools/{pool}/ramps` and
//! of a `pool.ramp` change request) and as it runs (`Plan`: every step's weights, hold and
//! minimum draws, the target last; the guards; what a breach does), parsed against the
//! pool's weights now (the baseline). Every refusal names its field.

use chrono::{DateTime, Utc};
use client::pool::ReweightMode;
use engine::ramp::{Guard, Metric, NoData};
use engine::Weights;
use serde::{Deserialize, Serialize};

use crate::error::ChangeError;

/// Most steps before the target.
pub const MAX_STEPS: usize = 20;
/// Most guards.
pub const MAX_GUARDS: usize = 10;
/// A step's hold when the plan gives none (seconds).
pub const DEFAULT_HOLD_SECONDS: u64 = 600;
/// The longest hold and abort (seconds): a week, a day.
pub const MAX_HOLD_SECONDS: u64 = 7 * 24 * 3600;
pub const MAX_ABORT_SECONDS: u64 = 24 * 3600;

/// A ramp as its author writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    /// The weights at the end, for every member (a channels pool's channels, registered
    /// and enabled); the members whose share it raises are the canary the guards watch.
    #[schema(value_type = Vec<crate::schema::WeightEntry>, min_items = 1)]
    pub target: Weights,
    /// The steps before the target, in order (1..=20).
    #[schema(min_items = 1, max_items = 20)]
    pub steps: Vec<StepInput>,
    /// Each step's hold unless it gives its own (seconds, 0..=604800; default 600).
    #[schema(maximum = 604800)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub hold_seconds: Option<u64>,
    /// Each step's minimum number of draws unless it gives its own (default 0).
    #[schema(maximum = 1000000000)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub min_draws: Option<u64>,
    /// Steps do not advance by themselves inside the pool's peak windows (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_in_peaks: Option<bool>,
    /// How each step reaches the tickets: `drain` (default: each batch stays exact) or
    /// `immediate`.
    #[schema(value_type = Option<crate::schema::ReweightMode>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ReweightMode>,
    /// What is watched (0..=10 guards).
    #[schema(max_items = 10)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<GuardInput>,
    /// What a breach does: `pause` (default), `step_back` (to the step before, paused) or
    /// `abort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_breach: Option<OnBreach>,
    /// An abort returns to the baseline at once (0, the default) or over this many seconds
    /// (0..=86400), in five published stages.
    #[schema(maximum = 86400)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub abort_seconds: Option<u64>,
}

/// One step before the target: exactly one of `share` or `weights`, and at most one of
/// `hold_seconds`, `hold_until` and `manual`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepInput {
    /// The percentage of the traffic the growing members get together (above their share
    /// now, below their target share, rising from step to step): they split it by their
    /// target weights, the others the rest by their weights now.
    #[schema(exclusive_minimum = 0, exclusive_maximum = 100)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// The step's weights, as given.
    #[schema(value_type = Option<Vec<crate::schema::WeightEntry>>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    /// Held this many seconds (0..=604800).
    #[schema(maximum = 604800)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub hold_seconds: Option<u64>,
    /// Held until this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until: Option<DateTime<Utc>>,
    /// Held until someone promotes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
    /// Draws the step must have served before it advances.
    #[schema(maximum = 1000000000)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub min_draws: Option<u64>,
}

/// A guard as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardInput {
    /// `success_rate`, `failure_rate` (0..=1) or `latency_ms` (mean, from the reported
    /// latency sums).
    #[schema(value_type = String, pattern = "^(success_rate|failure_rate|latency_ms)$")]
    pub metric: Metric,
    /// Absolute: the lowest success rate, the highest failure rate, the highest mean
    /// latency (ms). Relative: how far below (success) or above (failure) the baseline
    /// members' rate the canary may be, or for latency how much above theirs as a ratio.
    #[schema(minimum = 0, maximum = 600000)]
    pub threshold: f64,
    /// The threshold is relative to the baseline members over the same window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative: Option<bool>,
    /// Minutes of outcomes judged (1..=60, default 5; never before the step started).
    #[schema(minimum = 1, maximum = 60)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub window_minutes: Option<u32>,
    /// Fewer outcomes than this neither pass nor breach: the step holds (1..=10^9, default 100).
    #[schema(minimum = 1, maximum = 1000000000)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u64>,
    /// No canary outcomes at all: `pause` (default), `ignore` or `fail`.
    #[schema(value_type = Option<String>, pattern = "^(pause|ignore|fail)$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_data: Option<NoData>,
    /// Breaches in a row before the plan's action (1..=100, default 2).
    #[schema(minimum = 1, maximum = 100)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer", skip_serializing_if = "Option::is_none")]
    pub consecutive: Option<u32>,
    /// Breaches are recorded, nothing is changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
}

/// What a breach does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnBreach {
    Pause,
    StepBack,
    Abort,
}

impl OnBreach {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBreach::Pause => "pause",
            OnBreach::StepBack => "step_back",
            OnBreach::Abort => "abort",
        }
    }
}

/// How long a step holds before it may advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Hold {
    Seconds { seconds: u64 },
    Until { at: DateTime<Utc> },
    Manual,
}

/// One step as it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub weights: Weights,
    pub hold: Hold,
    pub min_draws: u64,
    /// The growing members' share (percent), when the step was given as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}

/// A ramp as it runs: the steps (the last is the target), the members that grow (the
/// canary) and the others (their baseline), the guards and what a breach does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub canary: Vec<String>,
    pub others: Vec<String>,
    pub guards: Vec<Guard>,
    pub on_breach: OnBreach,
    pub abort_seconds: u64,
    #[serde(with = "mode_name")]
    pub mode: ReweightMode,
    pub hold_in_peaks: bool,
}

mod mode_name {
    use client::pool::ReweightMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mode: &ReweightMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(mode.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ReweightMode, D::Error> {
        let name = String::deserialize(d)?;
        serde_json::from_value(serde_json::Value::String(name)).map_err(serde::de::Error::custom)
    }
}

fn malformed(field: impl Into<String>, rule: impl Into<String>) -> ChangeError {
    ChangeError::Malformed { field: field.into(), rule: rule.into() }
}

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ChangeError {
    ChangeError::Invalid { field: field.into(), rule: rule.into() }
}

impl PlanInput {
    /// The plan against the pool's weights now: 400 for a value out of its range, 422 for
    /// steps that do not lead from the baseline to the target.
    pub fn parse(&self, baseline: &Weights) -> Result<Plan, ChangeError> {
        if self.steps.is_empty() || self.steps.len() > MAX_STEPS {
            return Err(malformed("plan.steps", format!("must hold 1..={MAX_STEPS} steps before the target")));
        }
        if self.guards.len() > MAX_GUARDS {
            return Err(malformed("plan.guards", format!("at most {MAX_GUARDS} guards")));
        }
        let default_hold = self.hold_seconds.unwrap_or(DEFAULT_HOLD_SECONDS);
        if default_hold > MAX_HOLD_SECONDS {
            return Err(malformed("plan.hold_seconds", format!("must be at most {MAX_HOLD_SECONDS}")));
        }
        let default_draws = self.min_draws.unwrap_or(0);
        if default_draws > 1_000_000_000 {
            return Err(malformed("plan.min_draws", "must be at most 1000000000"));
        }
        let abort_seconds = self.abort_seconds.unwrap_or(0);
        if abort_seconds > MAX_ABORT_SECONDS {
            return Err(malformed("plan.abort_seconds", format!("must be at most {MAX_ABORT_SECONDS}")));
        }
        if self.target.iter().eq(baseline.iter()) {
            return Err(invalid("plan.target", "equals the pool's weights now: there is nothing to ramp"));
        }
        let canary = engine::ramp::growing(baseline, &self.target);
        if canary.is_empty() {
            return Err(invalid("plan.target", "raises no member's share: a ramp moves traffic onto members"));
        }
        let mut members: Vec<String> = baseline.members().to_vec();
        members.extend(self.target.members().iter().filter(|m| baseline.index_of(m).is_none()).cloned());
        let others = members.iter().filter(|m| !canary.contains(m)).cloned().collect();
        let mut steps = Vec::with_capacity(self.steps.len() + 1);
        for (i, step) in self.steps.iter().enumerate() {
            let field = |name: &str| format!("plan.steps[{i}].{name}");
            let weights = match (&step.share, &step.weights) {
                (Some(share), None) => {
                    if !share.is_finite() || *share <= 0.0 || *share >= 100.0 {
                        return Err(malformed(
                            field("share"),
                            format!("must be a percentage above 0 and below 100, got {share}"),
                        ));
                    }
                    // Shares are kept to a millionth of the traffic.
                    let ppm = (share * 10_000.0).round();
                    let generated = engine::ramp::steps_from_shares(baseline, &self.target, &[ppm as u64])
                        .map_err(|e| invalid(field("share"), e.to_string()))?;
                    generated.into_iter().next().expect("one share, one step")
                }
                (None, Some(weights)) => {
                    // Only the baseline's and the target's members, every one of them (0:
                    // not drawn), so that no step drops a member's cap or ejection.
                    if let Some(stranger) = weights.members().iter().find(|m| !members.contains(m)) {
                        return Err(invalid(
                            field("weights"),
                            format!("{stranger:?} is neither in the pool nor in the target"),
                        ));
                    }
                    let all = members.iter().map(|m| (m.clone(), weights.index_of(m).map_or(0, |i| weights.weight(i))));
                    Weights::from_integers(all).map_err(|e| invalid(field("weights"), e.to_string()))?
                }
                _ => return Err(invalid(format!("plan.steps[{i}]"), "give exactly one of share and weights")),
            };
            // The canary's share rises from step to step, above its share now and below its
            // target share, whatever form the steps take.
            let share = engine::ramp::share_of(&weights, &canary);
            let before = steps.last().map_or(engine::ramp::share_of(baseline, &canary), |s: &Step| {
                engine::ramp::share_of(&s.weights, &canary)
            });
            let name = if step.share.is_some() { "share" } else { "weights" };
            if share <= before + 1e-12 {
                return Err(invalid(
                    field(name),
                    format!(
                        "gives the canary {:.4}%, not more than the step before ({:.4}%)",
                        share * 100.0,
                        before * 100.0
                    ),
                ));
            }
            if share >= engine::ramp::share_of(&self.target, &canary) - 1e-12 {
                return Err(invalid(
                    field(name),
                    "gives the canary its target share or more: that is the target's place",
                ));
            }
            let holds = [step.hold_seconds.is_some(), step.hold_until.is_some(), step.manual == Some(true)];
            let hold = match (step.hold_seconds, step.hold_until, step.manual) {
                _ if holds.iter().filter(|h| **h).count() > 1 => {
                    return Err(invalid(
                        format!("plan.steps[{i}]"),
                        "give at most one of hold_seconds, hold_until and manual",
                    ))
                }
                (Some(seconds), _, _) if seconds > MAX_HOLD_SECONDS => {
                    return Err(malformed(field("hold_seconds"), format!("must be at most {MAX_HOLD_SECONDS}")))
                }
                (Some(seconds), _, _) => Hold::Seconds { seconds },
                (_, Some(at), _) => Hold::Until { at },
                (_, _, Some(true)) => Hold::Manual,
                _ => Hold::Seconds { seconds: default_hold },
            };
            let min_draws = step.min_draws.unwrap_or(default_draws);
            if min_draws > 1_000_000_000 {
                return Err(malformed(field("min_draws"), "must be at most 1000000000"));
            }
            steps.push(Step { weights, hold, min_draws, share: step.share });
        }
        steps.push(Step { weights: self.target.clone(), hold: Hold::Manual, min_draws: 0, share: None });
        for pair in steps.windows(2) {
            if pair[0].weights.iter().eq(pair[1].weights.iter()) {
                return Err(invalid("plan.steps", "two steps in a row have the same weights"));
            }
        }
        let mut guards = Vec::with_capacity(self.guards.len());
        for (i, g) in self.guards.iter().enumerate() {
            guards.push(g.parse(&format!("plan.guards[{i}]"))?);
        }
        Ok(Plan {
            steps,
            canary,
            others,
            guards,
            on_breach: self.on_breach.unwrap_or(OnBreach::Pause),
            abort_seconds,
            mode: self.mode.unwrap_or(ReweightMode::Drain),
            hold_in_peaks: self.hold_in_peaks.unwrap_or(false),
        })
    }
}

impl GuardInput {
    fn parse(&self, field: &str) -> Result<Guard, ChangeError> {
        let relative = self.relative.unwrap_or(false);
        let t = self.threshold;
        let ok = t.is_finite()
            && t >= 0.0
            && match (self.metric, relative) {
                (Metric::SuccessRate | Metric::FailureRate, _) => t <= 1.0,
                (Metric::LatencyMs, false) => t > 0.0 && t <= 600_000.0,
                (Metric::LatencyMs, true) => t <= 100.0,
            };
        if !ok {
            let rule = match (self.metric, relative) {
                (Metric::SuccessRate | Metric::FailureRate, _) => "must be a rate from 0 to 1",
                (Metric::LatencyMs, false) => "must be a latency in ms above 0 and at most 600000",
                (Metric::LatencyMs, true) => "must be a ratio from 0 to 100",
            };
            return Err(invalid(format!("{field}.threshold"), format!("{rule}, got {t}")));
        }
        let window_minutes = self.window_minutes.unwrap_or(5);
        if !(1..=60).contains(&window_minutes) {
            return Err(malformed(format!("{field}.window_minutes"), "must be 1..=60"));
        }
        let min_samples = self.min_samples.unwrap_or(100);
        if !(1..=1_000_000_000).contains(&min_samples) {
            return Err(malformed(format!("{field}.min_samples"), "must be 1..=1000000000"));
        }
        let consecutive = self.consecutive.unwrap_or(2);
        if !(1..=100).contains(&consecutive) {
            return Err(malformed(format!("{field}.consecutive"), "must be 1..=100"));
        }
        Ok(Guard {
            metric: self.metric,
            threshold: t,
            relative,
            window_minutes,
            min_samples,
            no_data: self.no_data.unwrap_or(NoData::Pause),
            consecutive,
            dry_run: self.dry_run.unwrap_or(false),
        })
    }
}

/// Checks every step as the pool's configuration it would publish (a peak window naming a
/// member a step leaves out, …), naming the step: a plan is refused whole rather than
/// stuck half-way.
pub fn check_steps(plan: &Plan, snapshot: &client::pool::PoolSnapshot) -> Result<(), ChangeError> {
    let last = plan.steps.len() - 1;
    for (i, step) in plan.steps.iter().enumerate() {
        let mut s = snapshot.clone();
        crate::pools::edit::set_weights(&mut s, step.weights.clone());
        s.version = 1;
        if let Err(e) = s.validate() {
            let field = if i == last { "plan.target".to_owned() } else { format!("plan.steps[{i}]") };
            return Err(invalid(field, format!("{}: {}", e.field, e.rule)));
        }
    }
    Ok(())
}

/// A guard in words: "success rate ≥ 95% (5 min, ≥ 100 outcomes)".
pub fn describe_guard(g: &Guard) -> String {
    let limit = match (g.metric, g.relative) {
        (Metric::SuccessRate, false) => format!("success rate ≥ {}%", g.threshold * 100.0),
        (Metric::SuccessRate, true) => format!("success rate ≥ baseline − {} points", g.threshold * 100.0),
        (Metric::FailureRate, false) => format!("failure rate ≤ {}%", g.threshold * 100.0),
        (Metric::FailureRate, true) => format!("failure rate ≤ baseline + {} points", g.threshold * 100.0),
        (Metric::LatencyMs, false) => format!("mean latency ≤ {} ms", g.threshold),
        (Metric::LatencyMs, true) => format!("mean latency ≤ baseline × {}", 1.0 + g.threshold),
    };
    format!("{limit} ({} min, ≥ {} outcomes)", g.window_minutes, g.min_samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: serde_json::Value) -> PlanInput {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn shares_become_steps_and_the_target_ends_the_plan() {
        let baseline = Weights::parse_spec("A=1,B=1").unwrap();
        let plan = input(json!({
            "target": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}, {"member": "C", "weight": 2}],
            "steps": [{"share": 10}, {"share": 25, "manual": true}, {"weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}, {"member": "C", "weight": 1}]}],
            "hold_seconds": 60,
            "guards": [{"metric": "success_rate", "threshold": 0.95}],
            "on_breach": "abort",
        }))
        .parse(&baseline)
        .unwrap();
        assert_eq!(plan.steps.len(), 4);
        assert_eq!(plan.steps[0].weights.to_string(), "A=9,B=9,C=2");
        assert_eq!(plan.steps[0].hold, Hold::Seconds { seconds: 60 });
        assert_eq!(plan.steps[1].hold, Hold::Manual);
        assert_eq!(plan.steps[3].weights.to_string(), "A=1,B=1,C=2");
        assert_eq!(plan.canary, vec!["C".to_owned()]);
        assert_eq!(plan.others, vec!["A".to_owned(), "B".to_owned()]);
        assert_eq!(plan.guards[0].consecutive, 2);
        assert_eq!(plan.on_breach, OnBreach::Abort);
        let stored = serde_json::to_value(&plan).unwrap();
        assert_eq!(serde_json::from_value::<Plan>(stored).unwrap(), plan);
    }

    #[test]
    fn refusals_name_the_field() {
        let baseline = Weights::parse_spec("A=1,B=1").unwrap();
        let target = json!([{"member": "A", "weight": 1}, {"member": "B", "weight": 3}]);
        let field = |v: serde_json::Value| match input(v).parse(&baseline) {
            Err(ChangeError::Invalid { field, .. } | ChangeError::Malformed { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"target": target, "steps": []})), "plan.steps");
        assert_eq!(field(json!({"target": target, "steps": [{"share": 80}]})), "plan.steps[0].share");
        assert_eq!(field(json!({"target": target, "steps": [{"share": 60}, {"share": 55}]})), "plan.steps[1].share");
        assert_eq!(
            field(json!({"target": target, "steps": [{"share": 60, "manual": true, "hold_seconds": 5}]})),
            "plan.steps[0]"
        );
        assert_eq!(field(json!({"target": target, "steps": [{}]})), "plan.steps[0]");
        assert_eq!(
            field(
                json!({"target": target, "steps": [{"share": 60}], "guards": [{"metric": "success_rate", "threshold": 2}]})
            ),
            "plan.guards[0].threshold"
        );
        assert_eq!(
            field(
                json!({"target": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}], "steps": [{"share": 60}]})
            ),
            "plan.target"
        );
    }
}
