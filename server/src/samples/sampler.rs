//! The pool sampler (the `pool_sampler` job runs it every 10 s): per pool, how long its
//! lists are, each member's draws today, each member's share of the last minute's draws
//! against the share its published weights give it, and how many batches its lists were
//! ever given (refills), stored in Postgres for the dashboard
//! (`GET /api/v1/pools/{pool}/samples`); the `sample_prune` job deletes old rows.
//!
//! Shares come from the pools' day counters (counted by the draw script, read through
//! [`client::PoolAdmin::read_out`]): the draws in a window are the difference between this
//! sample's counters and those of the sample about a minute earlier. When a pool-local
//! midnight falls in between, the counters restarted: the window's draws are what the
//! earlier day counted after the earlier sample (its hash lives 48 h after its day) plus
//! what the new day counted ([`engine::counter::day_count_delta`]).
//!
//! Each sample also sets the pool's gauges the alert rules read ([`record_sample`]):
//! members' share deviations, the main list against low-water, and when it was taken.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use anyhow::Context;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
pub use client::pool::ListLength;
use client::pool::{PoolKind, PoolName, PoolSnapshot, ReadOut};
use engine::counter::{day_count_delta, DaySpan};
use serde::Serialize;

use super::store::{get_earlier_sample, insert_sample, list_pools};
use crate::metrics::{retain_series, WatchMetrics};
use crate::state::AppState;

/// The span actual shares are measured over.
pub const WINDOW: TimeDelta = TimeDelta::seconds(60);

/// How much younger than [`WINDOW`] the earlier sample may be (ticks are not exact).
pub(crate) const WINDOW_SLACK: TimeDelta = TimeDelta::seconds(5);

/// The oldest earlier sample a window may start at: after a longer pause in sampling, a
/// sample has no window rather than a share averaged over minutes.
pub(crate) const MAX_WINDOW: TimeDelta = TimeDelta::seconds(180);

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Pools with a snapshot in Postgres.
    pub pools: u64,
    /// Samples stored.
    pub sampled: u64,
    /// Pools Redis holds no snapshot of (not published yet): nothing to sample.
    pub unpublished: u64,
    /// Pools whose sample failed (logged; the others are still sampled).
    pub failed: u64,
}

/// One member in one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberSample {
    /// Draws on the sample's day so far (the pool's day counter).
    pub hits: u64,
    /// Draws in the sample's window (`None` when the sample has no window).
    pub window_hits: Option<u64>,
    /// The share its published weight gives it, 0..=1.
    pub expected_share: f64,
    /// Its share of the window's draws, 0..=1 (`None` without a window or draws in it).
    pub actual_share: Option<f64>,
}

/// One sample of one pool, as stored and as the endpoint returns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolSample {
    pub taken_at: DateTime<Utc>,
    /// The snapshot version Redis held (the one draws used).
    pub version: u64,
    /// The pool-local day the members' `hits` belong to.
    pub day: NaiveDate,
    /// Tickets in the pool's list.
    pub tickets: u64,
    /// Tickets in its standby batch.
    pub standby: u64,
    /// `tickets + standby`: what the pool can hand out before a refill.
    pub length: u64,
    /// Batches ever added to the pool's lists (its refill sequence numbers, summed over
    /// the main list and each tier's): refills are this counter's increase between
    /// samples. `None` when Redis held no counter (or the sample predates the column).
    pub batches: Option<u64>,
    /// A `tiers` pool's tier lists by tier (`G`, `N`, `U`); `None` for a `channels` pool.
    pub tiers: Option<BTreeMap<String, ListLength>>,
    /// How far back the window reaches (about [`WINDOW`]); `None` without an earlier sample.
    pub window_seconds: Option<f64>,
    /// Draws in the window, all members together.
    pub draws: Option<u64>,
    pub members: BTreeMap<String, MemberSample>,
}

/// Samples every pool that has a snapshot in Postgres, at Redis `TIME`.
pub async fn sample_now(state: &AppState) -> anyhow::Result<Outcome> {
    let now = state.pool_admin.now().await.context("reading the clock (redis TIME)")?;
    run_at(state, now).await
}

/// Samples every pool as of `now`: the seam tests use to take samples a minute apart
/// without waiting a minute. Redis is read as it is; `now` names the day and the window.
pub async fn run_at(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let pools = list_pools(&state.db).await.context("listing pools")?;
    forget_other_pools(&state.metrics.watch, &pools);
    for pool in pools {
        outcome.pools += 1;
        match sample_pool(state, &pool, now).await {
            Ok(true) => outcome.sampled += 1,
            Ok(false) => outcome.unpublished += 1,
            Err(e) => {
                // One broken pool must not stop the others' samples.
                tracing::error!(pool = %pool, error = format!("{e:#}"), "sampling failed");
                outcome.failed += 1;
            }
        }
    }
    Ok(outcome)
}

/// Samples one pool; false when Redis holds no snapshot of it.
async fn sample_pool(state: &AppState, pool: &PoolName, now: DateTime<Utc>) -> anyhow::Result<bool> {
    let Some(snapshot) = state.pool_admin.snapshot(pool).await.context("reading the published snapshot")? else {
        return Ok(false);
    };
    let day = client::pool::admin::days_at(&snapshot, now)?.today;
    let readout =
        state.pool_admin.read_out(pool, &snapshot, day).await.context("reading the pool's lists and counters")?;
    let expected = expected_shares(&snapshot, now, &readout.ejected)?;
    let window = match get_earlier_sample(&state.db, pool, now).await.context("reading the earlier sample")? {
        None => None,
        Some(earlier) => {
            // After a pool-local midnight the earlier day's hash still holds its final
            // counts (it expires 48 h after its day).
            let earlier_day_now = if earlier.day == day {
                None
            } else {
                let hits = state.pool_admin.day_hits(pool, earlier.day).await;
                Some(hits.with_context(|| format!("reading the hits of {}", earlier.day))?)
            };
            let hits = window_hits(&earlier.hits, earlier_day_now.as_ref(), &readout.hits);
            Some(((now - earlier.taken_at).as_seconds_f64(), hits))
        }
    };
    let sample = assemble(&snapshot, now, day, &readout, &expected, window);
    insert_sample(&state.db, pool, &sample).await.context("storing the sample")?;
    record_sample(&state.metrics.watch, pool, &snapshot, &sample);
    // The pool's count of draws that found it empty exists from 0 on, so that a rule on
    // its increase sees the first one.
    state.metrics.pool.empty.with_label_values(&[pool.as_str()]);
    Ok(true)
}

/// Sets a pool's gauges from its sample: each member's share deviation, in points and
/// relative to its expected share (removed for a member without an actual share, or no
/// longer in the pool; the relative one also without an expected share), its main list's tickets,
/// its low-water mark, the sample's time, and the longest run its ordering allows.
pub fn record_sample(watch: &WatchMetrics, pool: &PoolName, snapshot: &PoolSnapshot, sample: &PoolSample) {
    let name = pool.as_str();
    retain_series(&watch.pool_share_deviation, |labels| {
        labels.get("pool") != Some(&name)
            || labels.get("member").and_then(|m| sample.members.get(*m)).is_some_and(|m| m.actual_share.is_some())
    });
    retain_series(&watch.pool_share_deviation_ratio, |labels| {
        labels.get("pool") != Some(&name)
            || labels
                .get("member")
                .and_then(|m| sample.members.get(*m))
                .is_some_and(|m| m.actual_share.is_some() && m.expected_share > 0.0)
    });
    for (member, m) in &sample.members {
        if let Some(actual) = m.actual_share {
            watch.pool_share_deviation.with_label_values(&[name, member]).set(actual - m.expected_share);
            if m.expected_share > 0.0 {
                let ratio = (actual - m.expected_share) / m.expected_share;
                watch.pool_share_deviation_ratio.with_label_values(&[name, member]).set(ratio);
            }
        }
    }
    watch.pool_tickets.with_label_values(&[name]).set(i64::try_from(sample.tickets).unwrap_or(i64::MAX));
    watch.pool_low_water.with_label_values(&[name]).set(i64::from(snapshot.low_water));
    watch.pool_sampled_at.with_label_values(&[name]).set(sample.taken_at.timestamp());
    // The run bound of a channels pool at the shares drawn now (ejections and peaks
    // included); a tiers pool draws across tiers, and one member alone runs for ever.
    let top = sample.members.values().map(|m| m.expected_share).fold(0.0, f64::max);
    let bound = (snapshot.kind == PoolKind::Channels)
        .then(|| engine::order::run_bound(top, snapshot.ordering, u64::from(snapshot.batch_size)))
        .flatten();
    match bound {
        Some(bound) => watch.pool_run_bound.with_label_values(&[name]).set(i64::try_from(bound).unwrap_or(i64::MAX)),
        None => retain_series(&watch.pool_run_bound, |labels| labels.get("pool") != Some(&name)),
    }
}

/// Removes the gauges of pools no longer configured.
fn forget_other_pools(watch: &WatchMetrics, pools: &[PoolName]) {
    let known =
        |labels: &HashMap<&str, &str>| labels.get("pool").is_some_and(|p| pools.iter().any(|k| k.as_str() == *p));
    retain_series(&watch.pool_share_deviation, known);
    retain_series(&watch.pool_share_deviation_ratio, known);
    retain_series(&watch.pool_tickets, known);
    retain_series(&watch.pool_low_water, known);
    retain_series(&watch.pool_sampled_at, known);
    retain_series(&watch.pool_run_bound, known);
}

fn assemble(
    snapshot: &PoolSnapshot,
    now: DateTime<Utc>,
    day: NaiveDate,
    readout: &ReadOut,
    expected: &BTreeMap<String, f64>,
    window: Option<(f64, BTreeMap<String, u64>)>,
) -> PoolSample {
    let mut names: BTreeSet<&str> = expected.keys().map(String::as_str).collect();
    names.extend(readout.hits.keys().map(String::as_str));
    if let Some((_, hits)) = &window {
        names.extend(hits.keys().map(String::as_str));
    }
    // Only names the table accepts (snapshots validate theirs; counters could hold anything).
    names.retain(|n| (1..=64).contains(&n.len()));
    let draws = window.as_ref().map(|(_, hits)| names.iter().map(|n| hits.get(*n).copied().unwrap_or(0)).sum::<u64>());
    let members = names
        .into_iter()
        .map(|name| {
            let window_hits = window.as_ref().map(|(_, hits)| hits.get(name).copied().unwrap_or(0));
            let actual_share = match (window_hits, draws) {
                (Some(h), Some(d)) if d > 0 => Some(h as f64 / d as f64),
                _ => None,
            };
            let member = MemberSample {
                hits: readout.hits.get(name).copied().unwrap_or(0),
                window_hits,
                expected_share: expected.get(name).copied().unwrap_or(0.0),
                actual_share,
            };
            (name.to_owned(), member)
        })
        .collect();
    PoolSample {
        taken_at: now,
        version: snapshot.version,
        day,
        tickets: readout.main.tickets,
        standby: readout.main.standby,
        length: readout.main.tickets + readout.main.standby,
        batches: readout.batches,
        tiers: readout.tiers.clone(),
        window_seconds: window.as_ref().map(|(seconds, _)| *seconds),
        draws,
        members,
    }
}

/// Each member's draws between an earlier sample's counters (`earlier`) and the counters
/// now (`today`). `earlier_day_now`: when the day changed in between, the earlier day's
/// counters as they are now (its draws after the earlier sample count too). A counter that
/// went down on the same day restarted (Redis lost it): all of its count is new.
pub fn window_hits(
    earlier: &HashMap<String, u64>,
    earlier_day_now: Option<&HashMap<String, u64>>,
    today: &HashMap<String, u64>,
) -> BTreeMap<String, u64> {
    let mut names: BTreeSet<&String> = earlier.keys().chain(today.keys()).collect();
    if let Some(old) = earlier_day_now {
        names.extend(old.keys());
    }
    let get = |map: &HashMap<String, u64>, name: &String| map.get(name).copied().unwrap_or(0);
    names
        .into_iter()
        .map(|name| {
            let (before, now) = (get(earlier, name), get(today, name));
            let span = match earlier_day_now {
                Some(old) => DaySpan::NewDay { earlier_day_now: Some(get(old, name)) },
                None => DaySpan::SameDay,
            };
            let drawn = day_count_delta(before, now, span);
            (name.clone(), drawn)
        })
        .collect()
}

/// The share of draws each channel should get at `at`: the weights in force (a peak
/// window's override, else the pool's), ejected channels at zero. In a `tiers` pool each
/// tier's share is split among its drawable channels by their weights; a tier with no
/// drawable channel is left out (its draws fall back to other tiers).
pub fn expected_shares(
    snapshot: &PoolSnapshot,
    at: DateTime<Utc>,
    ejected: &HashSet<String>,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let schedule = snapshot.schedule().map_err(|e| anyhow::anyhow!("published snapshot: {e}"))?;
    let top = schedule.weights_at(at, &snapshot.weights);
    let drawable = |name: &str, weight: u64| if ejected.contains(name) { 0 } else { weight };
    let mut shares = BTreeMap::new();
    match snapshot.kind {
        PoolKind::Channels => {
            let total: u64 = top.iter().map(|(m, w)| drawable(m, w)).sum();
            for (member, weight) in top.iter() {
                let share = if total == 0 { 0.0 } else { drawable(member, weight) as f64 / total as f64 };
                shares.insert(member.to_owned(), share);
            }
        }
        PoolKind::Tiers => {
            let mut lanes = Vec::new();
            for (tier, channels) in &snapshot.tiers {
                let tier_weight = top.index_of(tier.as_str()).map_or(0, |i| top.weight(i));
                let within: u64 = channels.iter().map(|(m, w)| drawable(m, w)).sum();
                for (member, _) in channels.iter() {
                    shares.insert(member.to_owned(), 0.0);
                }
                if tier_weight > 0 && within > 0 {
                    lanes.push((tier_weight, within, channels));
                }
            }
            let tiers_total: u64 = lanes.iter().map(|(w, _, _)| *w).sum();
            for (tier_weight, within, channels) in lanes {
                for (member, weight) in channels.iter() {
                    let share =
                        (tier_weight as f64 * drawable(member, weight) as f64) / (tiers_total as f64 * within as f64);
                    shares.insert(member.to_owned(), share.clamp(0.0, 1.0));
                }
            }
        }
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::{Ordering, Tier, Weights};

    fn counts(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
        pairs.iter().map(|(m, n)| ((*m).to_owned(), *n)).collect()
    }

    fn snapshot(kind: PoolKind, weights: &[(&str, u64)], tiers: &[(Tier, &[(&str, u64)])]) -> PoolSnapshot {
        PoolSnapshot {
            version: 1,
            kind,
            weights: Weights::from_integers(weights.iter().map(|(m, w)| (*m, *w))).unwrap(),
            tiers: tiers
                .iter()
                .map(|(t, ch)| (*t, Weights::from_integers(ch.iter().map(|(m, w)| (*m, *w))).unwrap()))
                .collect(),
            batch_size: 100,
            low_water: 10,
            ordering: Ordering::Smooth,
            timezone: "UTC".into(),
            peak_windows: vec![],
            caps: Default::default(),
            eject_rebuild_percent: 50,
            ejected: Default::default(),
            window_caps: None,
            draw_log: true,
        }
    }

    fn member(expected: f64, actual: Option<f64>) -> MemberSample {
        MemberSample { hits: 0, window_hits: None, expected_share: expected, actual_share: actual }
    }

    fn sample_of(taken_at: DateTime<Utc>, tickets: u64, members: &[(&str, MemberSample)]) -> PoolSample {
        PoolSample {
            taken_at,
            version: 1,
            day: taken_at.date_naive(),
            tickets,
            standby: 0,
            length: tickets,
            batches: None,
            tiers: None,
            window_seconds: Some(60.0),
            draws: Some(100),
            members: members.iter().map(|(m, s)| ((*m).to_owned(), s.clone())).collect(),
        }
    }

    /// The pool series a fresh registry exports (only the gauges a sample sets have any).
    fn gauge_lines(metrics: &crate::metrics::Metrics) -> Vec<String> {
        let mut lines: Vec<String> =
            metrics.render().lines().filter(|l| l.starts_with("tessera_pool_")).map(str::to_owned).collect();
        lines.sort();
        lines
    }

    #[test]
    fn a_sample_sets_the_deviation_of_members_with_an_actual_share_and_removes_the_others() {
        let metrics = crate::metrics::Metrics::new();
        let pool = PoolName::parse("cn-pay").unwrap();
        let snap = snapshot(PoolKind::Channels, &[("A", 1), ("B", 1)], &[]);
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let first = sample_of(at, 7, &[("A", member(0.5, Some(0.75))), ("B", member(0.5, Some(0.25)))]);
        record_sample(&metrics.watch, &pool, &snap, &first);
        assert_eq!(
            gauge_lines(&metrics),
            [
                r#"tessera_pool_low_water{pool="cn-pay"} 10"#,
                r#"tessera_pool_run_bound{pool="cn-pay"} 4"#,
                r#"tessera_pool_sampled_at_seconds{pool="cn-pay"} 1800000000"#,
                r#"tessera_pool_share_deviation_ratio{member="A",pool="cn-pay"} 0.5"#,
                r#"tessera_pool_share_deviation_ratio{member="B",pool="cn-pay"} -0.5"#,
                r#"tessera_pool_share_deviation{member="A",pool="cn-pay"} 0.25"#,
                r#"tessera_pool_share_deviation{member="B",pool="cn-pay"} -0.25"#,
                r#"tessera_pool_tickets{pool="cn-pay"} 7"#,
            ]
        );
        // B lost its actual share (no draws in the window) and A left the pool; C has no
        // expected share, so no relative deviation; B alone is drawn: no run bound.
        let later = at + TimeDelta::seconds(10);
        let second = sample_of(later, 5, &[("B", member(1.0, None)), ("C", member(0.0, Some(0.0)))]);
        record_sample(&metrics.watch, &pool, &snap, &second);
        assert_eq!(
            gauge_lines(&metrics),
            [
                r#"tessera_pool_low_water{pool="cn-pay"} 10"#,
                r#"tessera_pool_sampled_at_seconds{pool="cn-pay"} 1800000010"#,
                r#"tessera_pool_share_deviation{member="C",pool="cn-pay"} 0"#,
                r#"tessera_pool_tickets{pool="cn-pay"} 5"#,
            ]
        );
        // The pool is no longer configured: its gauges go.
        forget_other_pools(&metrics.watch, &[PoolName::parse("sea-pay").unwrap()]);
        assert_eq!(gauge_lines(&metrics), Vec::<String>::new());
    }

    #[test]
    fn window_hits_on_one_day_are_the_counter_differences() {
        let got = window_hits(&counts(&[("A", 10), ("B", 4)]), None, &counts(&[("A", 15), ("B", 4), ("C", 2)]));
        assert_eq!(got, BTreeMap::from([("A".into(), 5), ("B".into(), 0), ("C".into(), 2)]));
    }

    #[test]
    fn window_hits_across_midnight_add_the_old_days_tail_to_the_new_days_counts() {
        let earlier = counts(&[("A", 10), ("B", 4)]);
        let old_day_now = counts(&[("A", 12), ("B", 4)]);
        let today = counts(&[("A", 3), ("C", 5)]);
        let got = window_hits(&earlier, Some(&old_day_now), &today);
        assert_eq!(got, BTreeMap::from([("A".into(), 5), ("B".into(), 0), ("C".into(), 5)]));
    }

    #[test]
    fn a_counter_that_went_down_on_the_same_day_restarted() {
        let got = window_hits(&counts(&[("A", 10)]), None, &counts(&[("A", 3)]));
        assert_eq!(got, BTreeMap::from([("A".into(), 3)]));
    }

    #[test]
    fn expected_shares_of_a_channels_pool_leave_ejected_members_out() {
        let s = snapshot(PoolKind::Channels, &[("A", 5), ("B", 3), ("C", 2)], &[]);
        let none = expected_shares(&s, Utc::now(), &HashSet::new()).unwrap();
        assert_eq!(none, BTreeMap::from([("A".into(), 0.5), ("B".into(), 0.3), ("C".into(), 0.2)]));
        let ejected = expected_shares(&s, Utc::now(), &HashSet::from(["A".to_owned()])).unwrap();
        assert_eq!(ejected, BTreeMap::from([("A".into(), 0.0), ("B".into(), 0.6), ("C".into(), 0.4)]));
    }

    #[test]
    fn expected_shares_of_a_tiers_pool_split_each_tier_among_its_drawable_channels() {
        let s = snapshot(
            PoolKind::Tiers,
            &[("G", 60), ("N", 30), ("U", 10)],
            &[(Tier::G, &[("G1", 50), ("G2", 50)]), (Tier::N, &[("N1", 70), ("N2", 30)]), (Tier::U, &[("U1", 1)])],
        );
        let got = expected_shares(&s, Utc::now(), &HashSet::new()).unwrap();
        for (member, share) in [("G1", 0.3), ("G2", 0.3), ("N1", 0.21), ("N2", 0.09), ("U1", 0.1)] {
            assert!((got[member] - share).abs() < 1e-12, "{member}: {got:?}");
        }
        // U's only channel ejected: U's share goes to the other tiers; G2 ejected: G1 takes G's.
        let got = expected_shares(&s, Utc::now(), &HashSet::from(["U1".to_owned(), "G2".to_owned()])).unwrap();
        for (member, share) in [("G1", 60.0 / 90.0), ("G2", 0.0), ("N1", 0.7 * 30.0 / 90.0), ("U1", 0.0)] {
            assert!((got[member] - share).abs() < 1e-12, "{member}: {got:?}");
        }
    }
}
