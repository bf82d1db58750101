//! Channel health as a state machine (design.md §5): a failing window multiplies a member's
//! effective weight by a decay factor, at most once per cool-down; below a threshold share
//! of its base weight the member is ejected, unless the pool's ejection cap says too much
//! of the pool is out already, in which case it keeps a minimum weight; after a quiet
//! period it recovers with a slow start (a linear ramp back to its base weight, like
//! Envoy's slow start), and a failing window during recovery sends it back to decaying.
//!
//! Pure: the caller measures windows, keeps the state, and supplies the time (ms).

use serde::{Deserialize, Serialize};

/// The largest `min_volume`: counts are exact integers in JSON and Lua up to 2^53 − 1.
pub const MAX_VOLUME: u64 = (1 << 53) - 1;

/// A pool's health thresholds. Every field has a default; `validate` names the field of a
/// value out of range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Minutes of outcomes judged at once (the current minute and the ones before it).
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub window_minutes: u32,
    /// Fewer outcomes than this in a window: no decision.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub min_volume: u64,
    /// A window below this success rate fails.
    pub min_success_rate: f64,
    /// A failing window multiplies the factor by this.
    pub decay_factor: f64,
    /// At most one decay per this many ms.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub cooldown_ms: i64,
    /// Below this factor (share of the base weight) the member is ejected.
    pub eject_below: f64,
    /// Never more than this share (percent) of a pool's base weight ejected at once.
    pub max_ejected_percent: f64,
    /// How long without a failing window before recovery starts (ms).
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub quiet_ms: i64,
    /// How long the ramp back to the base weight takes (ms).
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub slow_start_ms: i64,
    /// Smoothing of the error and latency averages behind suggested weights (0.1–0.3 is
    /// usual); also the most a suggestion moves from the base weight, as a share of it.
    pub ewma_alpha: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            window_minutes: 1,
            min_volume: 20,
            min_success_rate: 0.9,
            decay_factor: 0.5,
            cooldown_ms: 60_000,
            eject_below: 0.1,
            max_ejected_percent: 50.0,
            quiet_ms: 60_000,
            slow_start_ms: 120_000,
            ewma_alpha: 0.2,
        }
    }
}

/// A policy value out of range: the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct PolicyError {
    pub field: &'static str,
    pub rule: &'static str,
}

impl PolicyError {
    /// `Ok` when `ok`, else the error naming `field` and `rule`.
    pub(crate) fn unless(ok: bool, field: &'static str, rule: &'static str) -> Result<(), PolicyError> {
        if ok {
            Ok(())
        } else {
            Err(PolicyError { field, rule })
        }
    }
}

impl Policy {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let check = PolicyError::unless;
        check((1..=60).contains(&self.window_minutes), "window_minutes", "must be in 1..=60")?;
        check((1..=MAX_VOLUME).contains(&self.min_volume), "min_volume", "must be in 1..=2^53-1")?;
        check((0.0..=1.0).contains(&self.min_success_rate), "min_success_rate", "must be in 0..=1")?;
        check(self.decay_factor > 0.0 && self.decay_factor < 1.0, "decay_factor", "must be in (0, 1)")?;
        check((0..=86_400_000).contains(&self.cooldown_ms), "cooldown_ms", "must be in 0..=86400000")?;
        check(self.eject_below > 0.0 && self.eject_below < 1.0, "eject_below", "must be in (0, 1)")?;
        check((0.0..=100.0).contains(&self.max_ejected_percent), "max_ejected_percent", "must be in 0..=100")?;
        check((0..=86_400_000).contains(&self.quiet_ms), "quiet_ms", "must be in 0..=86400000")?;
        check((1..=86_400_000).contains(&self.slow_start_ms), "slow_start_ms", "must be in 1..=86400000")?;
        check(self.ewma_alpha > 0.0 && self.ewma_alpha <= 1.0, "ewma_alpha", "must be in (0, 1]")?;
        Ok(())
    }
}

/// Where a member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Healthy,
    Decaying,
    Ejected,
    Recovering,
}

impl State {
    /// Every state, in the order a member moves through them (for counts per state that
    /// must name the states with no member too).
    pub const ALL: [State; 4] = [Self::Healthy, Self::Decaying, Self::Ejected, Self::Recovering];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Decaying => "decaying",
            Self::Ejected => "ejected",
            Self::Recovering => "recovering",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Some(match raw {
            "healthy" => Self::Healthy,
            "decaying" => Self::Decaying,
            "ejected" => Self::Ejected,
            "recovering" => Self::Recovering,
            _ => return None,
        })
    }
}

/// An operator's override of what health evaluation decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pin {
    Healthy,
    Ejected,
}

/// A member's health between evaluations. Times are ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub state: State,
    /// Effective weight = base × factor (0 when ejected).
    pub factor: f64,
    /// Ejection was due but the pool's cap held the member at the minimum weight.
    pub cap_bound: bool,
    pub last_decay_at: Option<i64>,
    pub last_failure_at: Option<i64>,
    pub recovering_since: Option<i64>,
    pub recovering_from: Option<f64>,
}

impl Default for Member {
    fn default() -> Self {
        Self {
            state: State::Healthy,
            factor: 1.0,
            cap_bound: false,
            last_decay_at: None,
            last_failure_at: None,
            recovering_since: None,
            recovering_from: None,
        }
    }
}

/// Outcomes of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Window {
    pub ok: u64,
    pub fail: u64,
}

impl Window {
    pub fn volume(self) -> u64 {
        self.ok + self.fail
    }

    /// Successes over outcomes; `None` without outcomes.
    pub fn success_rate(self) -> Option<f64> {
        (self.volume() > 0).then(|| self.ok as f64 / self.volume() as f64)
    }
}

/// What a window says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Too few outcomes to judge.
    NoDecision,
    Passing,
    Failing,
}

/// Judges a window against the policy.
pub fn verdict(window: Window, policy: &Policy) -> Verdict {
    match window.success_rate() {
        _ if window.volume() < policy.min_volume => Verdict::NoDecision,
        Some(rate) if rate < policy.min_success_rate => Verdict::Failing,
        _ => Verdict::Passing,
    }
}

/// One member of a pool as evaluation sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Input {
    /// The member's configured weight.
    pub base_weight: u64,
    pub member: Member,
    pub window: Window,
    pub pin: Option<Pin>,
    /// Out of the pool for another reason (an operator's ejection, a disabled channel):
    /// counts against the ejection cap, and health leaves it alone.
    pub ejected_otherwise: bool,
}

/// What evaluation decided for one member.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub member: Member,
    pub verdict: Verdict,
    /// Why the state or factor changed (`None`: nothing changed).
    pub change: Option<Change>,
}

/// Why a member changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Decayed,
    Ejected,
    /// Ejection was due, but the pool's cap holds the member at the minimum weight.
    CapBound,
    RecoveryStarted,
    Ramped,
    Recovered,
    Relapsed,
    /// An operator's pin set the state.
    Pinned,
}

/// Evaluates every member of one pool at `now`, in order: each decision sees the ejections
/// decided before it, so the cap holds across the pool.
pub fn evaluate_pool(inputs: &[Input], policy: &Policy, now: i64) -> Vec<Outcome> {
    let total: u64 = inputs.iter().map(|i| i.base_weight).sum();
    let out = |i: &Input, m: &Member| {
        i.ejected_otherwise || i.pin == Some(Pin::Ejected) || (i.pin.is_none() && m.state == State::Ejected)
    };
    let mut ejected_weight: u64 = inputs.iter().filter(|i| out(i, &i.member)).map(|i| i.base_weight).sum();
    let mut outcomes = Vec::with_capacity(inputs.len());
    for input in inputs {
        let was_out = out(input, &input.member);
        let may_eject = |extra: u64| {
            total > 0 && (ejected_weight + extra) as f64 * 100.0 <= policy.max_ejected_percent * total as f64
        };
        let outcome = step(input, policy, now, &may_eject);
        let is_out = out(input, &outcome.member);
        if is_out && !was_out {
            ejected_weight += input.base_weight;
        } else if was_out && !is_out {
            ejected_weight -= input.base_weight;
        }
        outcomes.push(outcome);
    }
    outcomes
}

fn step(input: &Input, policy: &Policy, now: i64, may_eject: &dyn Fn(u64) -> bool) -> Outcome {
    let verdict = verdict(input.window, policy);
    let mut m = input.member;
    let before = m;
    let change = match input.pin {
        Some(pin) => {
            // Pinned: held where the operator put it; the ramp starts afresh when unpinned.
            let (state, factor) = match pin {
                Pin::Healthy => (State::Healthy, 1.0),
                Pin::Ejected => (State::Ejected, 0.0),
            };
            m = Member { state, factor, ..Member::default() };
            (m != before).then_some(Change::Pinned)
        }
        None if input.ejected_otherwise => None,
        None => transition(&mut m, verdict, input.base_weight, policy, now, may_eject),
    };
    Outcome { member: m, verdict, change }
}

fn transition(
    m: &mut Member,
    verdict: Verdict,
    base: u64,
    policy: &Policy,
    now: i64,
    may_eject: &dyn Fn(u64) -> bool,
) -> Option<Change> {
    if verdict == Verdict::Failing {
        m.last_failure_at = Some(now);
        if m.state == State::Ejected {
            return None;
        }
        let relapse = m.state == State::Recovering;
        // At most one decay per cool-down; a relapse during recovery decays at once.
        let cooled = m.last_decay_at.is_none_or(|at| now - at >= policy.cooldown_ms);
        if !cooled && !relapse {
            return None;
        }
        let decayed = m.factor * policy.decay_factor;
        m.last_decay_at = Some(now);
        m.recovering_since = None;
        m.recovering_from = None;
        if decayed < policy.eject_below {
            if may_eject(base) {
                *m = Member { state: State::Ejected, factor: 0.0, cap_bound: false, ..*m };
                return Some(Change::Ejected);
            }
            let changed = m.state != State::Decaying || m.factor != policy.eject_below || !m.cap_bound;
            *m = Member { state: State::Decaying, factor: policy.eject_below, cap_bound: true, ..*m };
            return changed.then_some(Change::CapBound);
        }
        *m = Member { state: State::Decaying, factor: decayed, cap_bound: false, ..*m };
        return Some(if relapse { Change::Relapsed } else { Change::Decayed });
    }
    let quiet = m.last_failure_at.is_none_or(|at| now - at >= policy.quiet_ms);
    match m.state {
        State::Healthy => None,
        State::Decaying | State::Ejected if quiet => {
            let from = if m.state == State::Ejected { policy.eject_below } else { m.factor };
            *m = Member {
                state: State::Recovering,
                factor: from,
                cap_bound: false,
                recovering_since: Some(now),
                recovering_from: Some(from),
                ..*m
            };
            Some(Change::RecoveryStarted)
        }
        State::Decaying | State::Ejected => None,
        State::Recovering => {
            let since = m.recovering_since.unwrap_or(now);
            let from = m.recovering_from.unwrap_or(policy.eject_below);
            let progress = ((now - since) as f64 / policy.slow_start_ms as f64).clamp(0.0, 1.0);
            if progress >= 1.0 {
                *m = Member { state: State::Healthy, factor: 1.0, recovering_since: None, recovering_from: None, ..*m };
                return Some(Change::Recovered);
            }
            let factor = from + (1.0 - from) * progress;
            let changed = factor != m.factor;
            m.factor = factor;
            changed.then_some(Change::Ramped)
        }
    }
}

/// The effective weight of a member: its base weight × factor, rounded, at least 1 while
/// it is in the pool (0 when ejected or when its base weight is 0).
pub fn effective_weight(base: u64, factor: f64, ejected: bool) -> u64 {
    if ejected || base == 0 {
        return 0;
    }
    ((base as f64 * factor).round() as u64).clamp(1, base)
}

/// Exponentially weighted moving average: `previous` moved `alpha` of the way to `sample`.
pub fn ewma(previous: Option<f64>, sample: f64, alpha: f64) -> f64 {
    match previous {
        None => sample,
        Some(p) => p + alpha * (sample - p),
    }
}

/// Suggested base weights (never applied automatically): each member's weight scaled by
/// its reliability (1 − error EWMA) and its speed relative to the pool (mean latency EWMA
/// over its own, capped at 2×), renormalised to the same total, then moved at most
/// `alpha` × base from the current weight. Members without measurements keep their
/// weight.
pub fn suggested_weights(members: &[(u64, Option<f64>, Option<f64>)], alpha: f64) -> Vec<u64> {
    let latencies: Vec<f64> = members.iter().filter_map(|m| m.2).filter(|l| *l > 0.0).collect();
    let mean_latency = (!latencies.is_empty()).then(|| latencies.iter().sum::<f64>() / latencies.len() as f64);
    let score = |&(base, err, lat): &(u64, Option<f64>, Option<f64>)| -> f64 {
        let reliability = 1.0 - err.unwrap_or(0.0).clamp(0.0, 1.0);
        let speed = match (mean_latency, lat) {
            (Some(mean), Some(l)) if l > 0.0 => (mean / l).min(2.0),
            _ => 1.0,
        };
        base as f64 * reliability * speed
    };
    let total_base: f64 = members.iter().map(|m| m.0 as f64).sum();
    let total_score: f64 = members.iter().map(score).sum();
    members
        .iter()
        .map(|m| {
            let base = m.0 as f64;
            if total_score <= 0.0 || (m.1.is_none() && m.2.is_none()) {
                return m.0;
            }
            let target = score(m) * total_base / total_score;
            let step = alpha * base;
            (base + (target - base).clamp(-step, step)).round().max(0.0) as u64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn failing() -> Window {
        Window { ok: 20, fail: 80 }
    }

    fn passing() -> Window {
        Window { ok: 100, fail: 0 }
    }

    fn one(member: Member, window: Window, now: i64) -> Outcome {
        let input = Input { base_weight: 10, member, window, pin: None, ejected_otherwise: false };
        // A pool where this member is a small share, so the cap never binds.
        let others = Input {
            base_weight: 90,
            member: Member::default(),
            window: passing(),
            pin: None,
            ejected_otherwise: false,
        };
        evaluate_pool(&[input, others], &Policy::default(), now)[0]
    }

    #[test]
    fn a_failing_channel_halves_per_cool_down_and_is_ejected_below_the_threshold() {
        let p = Policy::default();
        let mut m = Member::default();
        let mut factors = Vec::new();
        for minute in 0..5 {
            let o = one(m, failing(), minute * MIN);
            m = o.member;
            factors.push((m.state, m.factor));
            // Half a cool-down later the window still fails: nothing more happens.
            let again = one(m, failing(), minute * MIN + MIN / 2);
            assert_eq!(again.member.factor, m.factor);
            m = again.member;
        }
        assert_eq!(factors[0], (State::Decaying, 0.5));
        assert_eq!(factors[1], (State::Decaying, 0.25));
        assert_eq!(factors[2], (State::Decaying, 0.125));
        assert_eq!(factors[3], (State::Ejected, 0.0), "0.0625 < {}", p.eject_below);
        assert_eq!(factors[4], (State::Ejected, 0.0));
    }

    #[test]
    fn low_volume_decides_nothing() {
        let o = one(Member::default(), Window { ok: 1, fail: 10 }, 0);
        assert_eq!((o.verdict, o.change, o.member), (Verdict::NoDecision, None, Member::default()));
    }

    #[test]
    fn recovery_ramps_linearly_and_a_relapse_decays_again() {
        let p = Policy::default();
        let ejected = Member {
            state: State::Ejected,
            factor: 0.0,
            last_failure_at: Some(0),
            last_decay_at: Some(0),
            ..Member::default()
        };
        // Before the quiet period: still ejected.
        assert_eq!(one(ejected, Window::default(), p.quiet_ms - 1).member.state, State::Ejected);
        let start = one(ejected, Window::default(), p.quiet_ms);
        assert_eq!(
            (start.member.state, start.member.factor, start.change),
            (State::Recovering, p.eject_below, Some(Change::RecoveryStarted))
        );
        let half = one(start.member, passing(), p.quiet_ms + p.slow_start_ms / 2);
        assert!((half.member.factor - (p.eject_below + (1.0 - p.eject_below) / 2.0)).abs() < 1e-9, "{half:?}");
        let done = one(half.member, passing(), p.quiet_ms + p.slow_start_ms);
        assert_eq!(
            (done.member.state, done.member.factor, done.change),
            (State::Healthy, 1.0, Some(Change::Recovered))
        );
        // A relapse halfway through recovery (even inside a cool-down): decaying from
        // where the ramp was.
        let quick = Policy { quiet_ms: 1_000, ..p };
        let recovering = Member {
            state: State::Recovering,
            factor: 0.5,
            last_decay_at: Some(0),
            recovering_since: Some(1_000),
            recovering_from: Some(0.1),
            ..Member::default()
        };
        let input =
            Input { base_weight: 10, member: recovering, window: failing(), pin: None, ejected_otherwise: false };
        let other = Input {
            base_weight: 90,
            member: Member::default(),
            window: passing(),
            pin: None,
            ejected_otherwise: false,
        };
        let o = evaluate_pool(&[input, other], &quick, 2_000)[0];
        assert_eq!((o.member.state, o.member.factor, o.change), (State::Decaying, 0.25, Some(Change::Relapsed)));
        // A relapse halfway through recovery: decaying from where the ramp was.
        let relapse = one(half.member, failing(), p.quiet_ms + p.slow_start_ms / 2 + 1);
        assert_eq!((relapse.member.state, relapse.change), (State::Decaying, Some(Change::Relapsed)));
        assert!((relapse.member.factor - half.member.factor * p.decay_factor).abs() < 1e-9);
    }

    #[test]
    fn the_cap_stops_ejections_and_keeps_a_minimum_weight() {
        let p = Policy::default();
        let about_to_go = Member {
            state: State::Decaying,
            factor: 0.125,
            last_decay_at: Some(0),
            last_failure_at: Some(0),
            ..Member::default()
        };
        let inputs: Vec<Input> = (0..3)
            .map(|_| Input {
                base_weight: 30,
                member: about_to_go,
                window: failing(),
                pin: None,
                ejected_otherwise: false,
            })
            .chain(std::iter::once(Input {
                base_weight: 10,
                member: Member::default(),
                window: passing(),
                pin: None,
                ejected_otherwise: false,
            }))
            .collect();
        let out = evaluate_pool(&inputs, &p, MIN);
        let states: Vec<(State, bool)> = out.iter().map(|o| (o.member.state, o.member.cap_bound)).collect();
        // 30 of 100 may go (≤ 50%); a second would make 60%.
        assert_eq!(
            states,
            vec![(State::Ejected, false), (State::Decaying, true), (State::Decaying, true), (State::Healthy, false)]
        );
        assert_eq!(out[1].member.factor, p.eject_below);
        assert_eq!(out[1].change, Some(Change::CapBound));
    }

    #[test]
    fn pins_override_and_ejected_otherwise_is_left_alone() {
        let pinned = Input {
            base_weight: 10,
            member: Member { state: State::Decaying, factor: 0.25, ..Member::default() },
            window: failing(),
            pin: Some(Pin::Healthy),
            ejected_otherwise: false,
        };
        let o = evaluate_pool(&[pinned], &Policy::default(), 0)[0];
        assert_eq!((o.member.state, o.member.factor, o.change), (State::Healthy, 1.0, Some(Change::Pinned)));
        let out =
            Input { base_weight: 10, member: Member::default(), window: failing(), pin: None, ejected_otherwise: true };
        let o = evaluate_pool(&[out], &Policy::default(), 0)[0];
        assert_eq!((o.member, o.change), (Member::default(), None));
    }

    #[test]
    fn effective_weights_and_suggestions_stay_in_bounds() {
        assert_eq!(effective_weight(45, 0.5, false), 23);
        assert_eq!(effective_weight(45, 0.001, false), 1);
        assert_eq!(effective_weight(45, 1.0, true), 0);
        let suggested = suggested_weights(&[(50, Some(0.5), Some(100.0)), (50, Some(0.0), Some(100.0))], 0.2);
        assert_eq!(suggested, vec![40, 60], "each moves at most 20% of its weight");
        assert_eq!(suggested_weights(&[(30, None, None), (70, None, None)], 0.2), vec![30, 70]);
    }

    #[test]
    fn policies_out_of_range_name_the_field() {
        let bad = Policy { decay_factor: 1.5, ..Policy::default() };
        assert_eq!(bad.validate().unwrap_err().field, "decay_factor");
        assert!(Policy::default().validate().is_ok());
        let parsed: Result<Policy, _> = serde_json::from_str(r#"{"colour": 1}"#);
        assert!(parsed.is_err());
    }
}
