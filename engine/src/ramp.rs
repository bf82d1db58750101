//! Ramps (staged gray releases): the weight sets of the steps between a pool's baseline
//! weights and its target, generated from shares of the traffic for the members that
//! grow; and the guards' verdicts on the outcomes measured for those members (the canary)
//! and for the others (the baseline) over the same window.

use serde::{Deserialize, Serialize};

use crate::Weights;

/// The total a generated step's weights are apportioned over before they are reduced:
/// shares are exact to one part in a million.
pub const STEP_RESOLUTION: u64 = 1_000_000;

/// Why steps cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RampError {
    #[error("the target grows no member's share: it equals the baseline's shares or shrinks them all")]
    NothingGrows,
    #[error(
        "share {value}% must be above the growing members' share now ({from}%) and below their target share ({to}%)"
    )]
    OutOfRange { value: String, from: String, to: String },
    #[error("share {value}% must be above the share of the step before it")]
    NotIncreasing { value: String },
    #[error("{0}")]
    Weights(String),
}

/// The members whose share the target raises above the baseline's (a member new to the
/// pool has a baseline share of 0), in the target's order.
pub fn growing(baseline: &Weights, target: &Weights) -> Vec<String> {
    target
        .iter()
        .filter(|&(m, w)| {
            let before = baseline.index_of(m).map_or(0.0, |i| baseline.weight(i) as f64 / baseline.total() as f64);
            w as f64 / target.total() as f64 > before + 1e-12
        })
        .map(|(m, _)| m.to_owned())
        .collect()
}

/// The share of the traffic `members` get together under `weights` (0..=1).
pub fn share_of(weights: &Weights, members: &[String]) -> f64 {
    let sum: u64 = members.iter().filter_map(|m| weights.index_of(m)).map(|i| weights.weight(i)).sum();
    sum as f64 / weights.total() as f64
}

/// Weight sets for the given shares (in millionths of the traffic, increasing) of the
/// growing members: they split each share in proportion to their target weights, and the
/// other members split the rest in proportion to their baseline weights. Every step holds
/// every member of the baseline and the target (a member not yet or no longer drawn has
/// weight 0). The target itself is not among the steps.
pub fn steps_from_shares(baseline: &Weights, target: &Weights, shares_ppm: &[u64]) -> Result<Vec<Weights>, RampError> {
    let grow = growing(baseline, target);
    if grow.is_empty() {
        return Err(RampError::NothingGrows);
    }
    let from = share_of(baseline, &grow);
    let to = share_of(target, &grow);
    let mut members: Vec<String> = baseline.members().to_vec();
    members.extend(target.members().iter().filter(|m| baseline.index_of(m).is_none()).cloned());
    let mut steps = Vec::with_capacity(shares_ppm.len());
    let mut previous = 0u64;
    for &ppm in shares_ppm {
        let share = ppm as f64 / STEP_RESOLUTION as f64;
        let percent = |v: f64| format!("{}", (v * 1e6).round() / 1e4);
        if ppm <= previous && previous > 0 {
            return Err(RampError::NotIncreasing { value: percent(share) });
        }
        if share <= from + 1e-9 || share >= to - 1e-9 {
            return Err(RampError::OutOfRange { value: percent(share), from: percent(from), to: percent(to) });
        }
        previous = ppm;
        // Growing members by target weight, the others by baseline weight.
        let mut parts: Vec<(u128, u128)> = Vec::with_capacity(members.len());
        let grow_total: u128 =
            grow.iter().filter_map(|m| target.index_of(m)).map(|i| u128::from(target.weight(i))).sum();
        let rest_total: u128 = members
            .iter()
            .filter(|m| !grow.contains(m))
            .filter_map(|m| baseline.index_of(m))
            .map(|i| u128::from(baseline.weight(i)))
            .sum();
        for m in &members {
            let (w, total, part) = if grow.contains(m) {
                (target.index_of(m).map_or(0, |i| target.weight(i)), grow_total, ppm)
            } else {
                (baseline.index_of(m).map_or(0, |i| baseline.weight(i)), rest_total, STEP_RESOLUTION - ppm)
            };
            if total == 0 {
                parts.push((0, 1));
            } else {
                parts.push((u128::from(w) * u128::from(part), total));
            }
        }
        let weights = largest_remainder(&parts, STEP_RESOLUTION);
        let step = Weights::from_integers(members.iter().cloned().zip(weights))
            .map_err(|e| RampError::Weights(e.to_string()))?
            .reduced();
        steps.push(step);
    }
    Ok(steps)
}

/// Integer parts of the fractions `num / den` (which sum to `total`), rounded so that they
/// sum to exactly `total`: the largest remainders round up (compared as floating-point
/// fractions, ties by position; only which part gets a last unit depends on it).
fn largest_remainder(parts: &[(u128, u128)], total: u64) -> Vec<u64> {
    let mut floors: Vec<u64> = parts.iter().map(|&(n, d)| (n / d) as u64).collect();
    let given: u64 = floors.iter().sum();
    let remainder = |i: usize| (parts[i].0 % parts[i].1) as f64 / parts[i].1 as f64;
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| remainder(b).total_cmp(&remainder(a)).then(a.cmp(&b)));
    for &i in order.iter().take(total.saturating_sub(given) as usize) {
        floors[i] += 1;
    }
    floors
}

/// Weights part of the way from `from` to `to` (`done` of `of` stages): each member's
/// share moves in a straight line; used by a gradual abort. Every member of either is kept.
/// Shares are computed in floating point and apportioned to millionths (exactness is not
/// needed on the way back; the last stage is the baseline itself).
pub fn between(from: &Weights, to: &Weights, done: u64, of: u64) -> Result<Weights, RampError> {
    let of = of.max(1);
    let done = done.min(of);
    let mut members: Vec<String> = from.members().to_vec();
    members.extend(to.members().iter().filter(|m| from.index_of(m).is_none()).cloned());
    let share = |w: &Weights, m: &str| w.index_of(m).map_or(0.0, |i| w.weight(i) as f64 / w.total() as f64);
    let (left, gone) = ((of - done) as f64 / of as f64, done as f64 / of as f64);
    // Parts in billionths of a millionth, as integers, for the exact apportionment.
    const SCALE: u128 = 1_000_000_000;
    let parts: Vec<(u128, u128)> = members
        .iter()
        .map(|m| {
            let s = left * share(from, m) + gone * share(to, m);
            (((s * STEP_RESOLUTION as f64) * SCALE as f64).round().max(0.0) as u128, SCALE)
        })
        .collect();
    let weights = largest_remainder(&parts, STEP_RESOLUTION);
    Weights::from_integers(members.into_iter().zip(weights))
        .map(|w| w.reduced())
        .map_err(|e| RampError::Weights(e.to_string()))
}

/// Outcomes counted over a window (summed over members and minutes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub ok: u64,
    pub fail: u64,
    pub latency_ms_sum: u64,
    pub latency_count: u64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.ok += other.ok;
        self.fail += other.fail;
        self.latency_ms_sum += other.latency_ms_sum;
        self.latency_count += other.latency_count;
    }
}

/// What a guard measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// `ok / (ok + fail)`: breached below the threshold (or more than the threshold below
    /// the baseline's, when relative).
    SuccessRate,
    /// `fail / (ok + fail)`: breached above the threshold (or more than the threshold above
    /// the baseline's).
    FailureRate,
    /// Mean latency in ms: breached above the threshold (or, relative, above the
    /// baseline's times `1 + threshold`).
    LatencyMs,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::SuccessRate => "success_rate",
            Metric::FailureRate => "failure_rate",
            Metric::LatencyMs => "latency_ms",
        }
    }

    /// The value and its sample count.
    pub fn measure(self, c: Counts) -> (Option<f64>, u64) {
        let calls = c.ok + c.fail;
        match self {
            Metric::SuccessRate => ((calls > 0).then(|| c.ok as f64 / calls as f64), calls),
            Metric::FailureRate => ((calls > 0).then(|| c.fail as f64 / calls as f64), calls),
            Metric::LatencyMs => {
                ((c.latency_count > 0).then(|| c.latency_ms_sum as f64 / c.latency_count as f64), c.latency_count)
            }
        }
    }
}

/// What a guard does when the canary has no outcomes at all in its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoData {
    /// The ramp pauses until someone looks (never an abort).
    Pause,
    /// As if the guard passed.
    Ignore,
    /// As if it were breached.
    Fail,
}

/// One guard of a ramp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Guard {
    pub metric: Metric,
    pub threshold: f64,
    /// The threshold is a distance from the baseline members' value over the same window.
    pub relative: bool,
    pub window_minutes: u32,
    /// Fewer samples than this (but some) neither pass nor breach: the step holds.
    pub min_samples: u64,
    pub no_data: NoData,
    /// Breaches in a row before the ramp acts.
    pub consecutive: u32,
    /// Breaches are recorded and nothing is changed.
    pub dry_run: bool,
}

/// A guard's verdict on one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Pass {
        value: f64,
        limit: f64,
        samples: u64,
    },
    Breach {
        value: f64,
        limit: f64,
        samples: u64,
    },
    /// Some samples, fewer than the minimum (or a relative guard's baseline has too few).
    TooFew {
        samples: u64,
        baseline_samples: Option<u64>,
    },
    /// No canary outcomes at all.
    NoData,
}

impl Guard {
    /// Judges the canary's outcomes (and the baseline's, for a relative guard).
    pub fn judge(&self, canary: Counts, baseline: Counts) -> Verdict {
        let (value, samples) = self.metric.measure(canary);
        let Some(value) = value else {
            return if samples == 0 { Verdict::NoData } else { Verdict::TooFew { samples, baseline_samples: None } };
        };
        if samples < self.min_samples {
            return Verdict::TooFew { samples, baseline_samples: None };
        }
        let limit = if self.relative {
            let (base, base_samples) = self.metric.measure(baseline);
            match base {
                Some(base) if base_samples >= self.min_samples => match self.metric {
                    Metric::SuccessRate => base - self.threshold,
                    Metric::FailureRate => base + self.threshold,
                    Metric::LatencyMs => base * (1.0 + self.threshold),
                },
                _ => return Verdict::TooFew { samples, baseline_samples: Some(base_samples) },
            }
        } else {
            self.threshold
        };
        let breached = match self.metric {
            Metric::SuccessRate => value < limit,
            Metric::FailureRate | Metric::LatencyMs => value > limit,
        };
        if breached {
            Verdict::Breach { value, limit, samples }
        } else {
            Verdict::Pass { value, limit, samples }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(spec: &str) -> Weights {
        Weights::parse_spec(spec).unwrap()
    }

    fn share(weights: &Weights, member: &str) -> f64 {
        weights.index_of(member).map_or(0.0, |i| weights.weight(i) as f64 / weights.total() as f64)
    }

    #[test]
    fn a_new_channel_grows_through_its_shares_and_the_others_keep_their_proportions() {
        let steps = steps_from_shares(&w("A=3,B=1"), &w("A=3,B=1,C=4"), &[10_000, 100_000, 250_000]).unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0].to_string(), "A=297,B=99,C=4");
        assert_eq!(steps[1].to_string(), "A=27,B=9,C=4");
        assert_eq!(steps[2].to_string(), "A=9,B=3,C=4");
        for (step, expected) in steps.iter().zip([0.01, 0.1, 0.25]) {
            assert!((share(step, "C") - expected).abs() < 1e-9);
            assert!((share(step, "A") / share(step, "B") - 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn shares_must_rise_between_the_baseline_and_the_target() {
        let (base, target) = (w("A=1,B=0"), w("A=1,B=1"));
        assert!(matches!(steps_from_shares(&base, &target, &[600_000]), Err(RampError::OutOfRange { .. })));
        assert!(matches!(steps_from_shares(&base, &target, &[200_000, 100_000]), Err(RampError::NotIncreasing { .. })));
        assert_eq!(steps_from_shares(&base, &base, &[100_000]), Err(RampError::NothingGrows));
    }

    #[test]
    fn between_walks_back_in_straight_lines() {
        let (from, to) = (w("A=1,B=1"), w("A=1,B=0"));
        assert_eq!(between(&from, &to, 0, 4).unwrap().to_string(), "A=1,B=1");
        assert_eq!(between(&from, &to, 2, 4).unwrap().to_string(), "A=3,B=1");
        assert_eq!(between(&from, &to, 4, 4).unwrap().to_string(), "A=1,B=0");
    }

    fn guard(metric: Metric, threshold: f64, relative: bool) -> Guard {
        Guard {
            metric,
            threshold,
            relative,
            window_minutes: 5,
            min_samples: 10,
            no_data: NoData::Pause,
            consecutive: 2,
            dry_run: false,
        }
    }

    fn counts(ok: u64, fail: u64) -> Counts {
        Counts { ok, fail, latency_ms_sum: (ok + fail) * 100, latency_count: ok + fail }
    }

    #[test]
    fn verdicts() {
        let g = guard(Metric::SuccessRate, 0.95, false);
        assert!(matches!(g.judge(counts(70, 30), Counts::default()), Verdict::Breach { .. }));
        assert!(matches!(g.judge(counts(99, 1), Counts::default()), Verdict::Pass { .. }));
        assert_eq!(g.judge(Counts::default(), counts(5, 0)), Verdict::NoData);
        assert!(matches!(g.judge(counts(5, 0), Counts::default()), Verdict::TooFew { samples: 5, .. }));
        let rel = guard(Metric::SuccessRate, 0.02, true);
        assert!(matches!(rel.judge(counts(96, 4), counts(99, 1)), Verdict::Breach { .. }));
        assert!(matches!(rel.judge(counts(98, 2), counts(99, 1)), Verdict::Pass { .. }));
        assert!(matches!(rel.judge(counts(98, 2), counts(1, 0)), Verdict::TooFew { baseline_samples: Some(1), .. }));
        assert!(matches!(
            guard(Metric::FailureRate, 0.1, false).judge(counts(70, 30), counts(0, 0)),
            Verdict::Breach { .. }
        ));
        assert!(matches!(
            guard(Metric::LatencyMs, 50.0, false).judge(counts(10, 0), counts(0, 0)),
            Verdict::Breach { .. }
        ));
        assert!(matches!(
            guard(Metric::LatencyMs, 0.5, true).judge(counts(10, 0), counts(10, 0)),
            Verdict::Pass { .. }
        ));
    }

    /// Sticky keys (the weighted consistent-hash ring, rebuilt from each step's weights)
    /// that change member between two steps, against the least that must: the canary's
    /// gain. Every key that moves must move to the canary or between others needlessly.
    #[test]
    fn sticky_keys_moved_between_steps_stay_within_twice_the_least_possible() {
        use crate::hashing::HashRing;
        let (base, target) = (w("A=45,B=30,C=25"), w("A=45,B=30,C=25,D=100"));
        let steps = steps_from_shares(&base, &target, &[10_000, 50_000, 200_000, 400_000]).unwrap();
        let keys: Vec<Vec<u8>> = (0..20_000).map(|i| format!("user-{i}").into_bytes()).collect();
        let mut previous: Option<(Weights, Vec<String>)> = None;
        for step in steps {
            let ring = HashRing::new(&step, 160);
            let owners: Vec<String> = keys.iter().map(|k| ring.lookup_name(k).to_owned()).collect();
            if let Some((before, earlier)) = &previous {
                let moved = owners.iter().zip(earlier).filter(|(a, b)| a != b).count() as f64 / keys.len() as f64;
                let least = share(&step, "D") - share(before, "D");
                let to_canary = owners.iter().zip(earlier).filter(|(a, b)| a != b && a.as_str() == "D").count() as f64
                    / keys.len() as f64;
                eprintln!("{before} -> {step}: moved {moved:.4}, to the canary {to_canary:.4}, least {least:.4}");
                assert!(moved <= 2.2 * least + 0.01, "moved {moved} for a gain of {least}");
            }
            previous = Some((step, owners));
        }
    }

    proptest! {
        #[test]
        fn generated_steps_give_each_share_exactly_and_keep_the_others_proportions(
            base in proptest::collection::vec(1u64..1000, 1..5),
            new in 1u64..1000,
            raw in proptest::collection::btree_set(1u64..999, 1..5),
        ) {
            let mut pairs: Vec<(String, u64)> = base.iter().enumerate().map(|(i, &w)| (format!("m{i}"), w)).collect();
            let baseline = Weights::from_integers(pairs.clone()).unwrap();
            pairs.push(("canary".into(), new));
            let target = Weights::from_integers(pairs).unwrap();
            let top = share_of(&target, &["canary".to_owned()]);
            let shares: Vec<u64> = raw.iter().map(|r| r * 1000).filter(|&p| (p as f64) / 1e6 < top - 1e-6).collect();
            prop_assume!(!shares.is_empty());
            let steps = steps_from_shares(&baseline, &target, &shares).unwrap();
            for (step, ppm) in steps.iter().zip(&shares) {
                prop_assert!((share(step, "canary") - *ppm as f64 / 1e6).abs() <= 2e-6);
                for (i, &b) in base.iter().enumerate() {
                    let expected = b as f64 / baseline.total() as f64 * (1.0 - *ppm as f64 / 1e6);
                    let name = format!("m{i}");
                    prop_assert!((share(step, &name) - expected).abs() <= 2e-6);
                }
            }
        }
    }
}
