//! Traffic replay: what a configuration would have done with the traffic a pool really
//! served. The demand (how many draws each minute asked for) runs through a simulation of
//! the pool as Redis keeps it: batches apportioned with carried remainders and ordered as
//! configured, built when the list falls below low-water (peak windows scale and reweight
//! them by the minute they are built in), tickets of ejected members never issued, tickets
//! of members at their daily or short-window cap skipped (at most [`MAX_SKIPS`] a draw,
//! as the draw script), a `tiers` pool's tier tickets mapped to channels by the tier
//! fallback. The simulated sequence is measured like any other ([`crate::metrics`]).
//!
//! Pure and seeded: the same configuration, demand and seed replay the same.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use chrono::{DateTime, NaiveDate, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::order::{build_batch, TailRun};
use crate::peak::PeakSchedule;
use crate::tier::{fallback, Tier};
use crate::{Apportioner, BatchSize, Ordering, Weights};

/// The most tickets one draw skips before it is refused (the draw script's bound).
pub const MAX_SKIPS: usize = 64;

/// The largest batch a replay builds (the pools' own bound).
pub const MAX_BATCH: u32 = 100_000;

pub use crate::caps::WindowCaps;

/// A pool's configuration as the replay needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// A channels pool's members, or a tiers pool's tiers, with their weights.
    pub weights: Weights,
    /// A tiers pool's channels per tier (empty for a channels pool).
    pub tiers: BTreeMap<Tier, Weights>,
    pub batch_size: BatchSize,
    pub low_water: u32,
    pub ordering: Ordering,
    /// The pool's timezone (its day) and peak windows.
    pub schedule: PeakSchedule,
    pub daily_caps: BTreeMap<String, u64>,
    pub window_caps: Option<WindowCaps>,
    pub ejected: BTreeSet<String>,
}

/// How many draws the pool served in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    pub draws: u64,
}

/// What a replay drew.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replayed {
    /// Every channel the configuration can draw, in a fixed order (indices of `sequence`).
    pub members: Vec<String>,
    /// Each channel's expected share by the configuration's weights (no caps, no peaks).
    pub expected_shares: Vec<f64>,
    /// The draws served, in order, as indices into `members`.
    pub sequence: Vec<u32>,
    /// Per channel, tickets skipped because it was at a cap.
    pub cap_hits: Vec<u64>,
    /// Draws that found nothing to serve (every ticket looked at was capped).
    pub refused: u64,
    /// Batches built (the main list's; a tiers pool's tier lists not counted).
    pub batches: u64,
}

/// One list of tickets (a pool's, or one tier's), refilled as the refiller would.
struct Lane {
    weights: Weights,
    apportioner: Apportioner,
    tickets: VecDeque<usize>,
    tail: Vec<usize>,
    batches: u64,
}

impl Lane {
    fn new(weights: Weights) -> Self {
        Self {
            apportioner: Apportioner::new(weights.clone()),
            weights,
            tickets: VecDeque::new(),
            tail: Vec::new(),
            batches: 0,
        }
    }

    /// Adds one batch built now with `weights` (ejected members at zero), `batch` tickets.
    fn refill(&mut self, weights: &Weights, batch: BatchSize, ordering: Ordering, rng: &mut impl Rng) -> bool {
        if self.apportioner.weights() != weights {
            self.apportioner.reweight(weights.clone());
            self.weights = weights.clone();
        }
        let counts = self.apportioner.next_counts(batch);
        let order = build_batch(ordering, &counts, TailRun::of(&self.tail), rng);
        if order.is_empty() {
            return false;
        }
        self.tail = order[order.len().saturating_sub(64)..].to_vec();
        self.tickets.extend(order);
        self.batches += 1;
        true
    }
}

/// `weights` with the `ejected` members at zero; `None` when nothing is left.
fn without(weights: &Weights, ejected: &BTreeSet<String>) -> Option<Weights> {
    if ejected.is_empty() {
        return Some(weights.clone());
    }
    Weights::from_integers(weights.iter().map(|(m, w)| (m.to_owned(), if ejected.contains(m) { 0 } else { w }))).ok()
}

/// Counters that reset: per local day, and per short window.
struct Counted {
    day: Option<NaiveDate>,
    day_hits: Vec<u64>,
    window: Option<i64>,
    window_hits: Vec<u64>,
}

/// Replays `demand` (minutes in order) through `config`, seeded by `rng`.
pub fn replay(config: &ReplayConfig, demand: &[Demand], rng: &mut impl Rng) -> Replayed {
    let tiers_pool = !config.tiers.is_empty();
    // The channels, and for a tiers pool which tier each belongs to.
    let members: Vec<String> = if tiers_pool {
        config.tiers.values().flat_map(|w| w.members().iter().cloned()).collect()
    } else {
        config.weights.members().to_vec()
    };
    let index: BTreeMap<&str, usize> = members.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
    let expected_shares = expected_shares(config, &members);
    let daily: Vec<Option<u64>> = members.iter().map(|m| config.daily_caps.get(m).copied()).collect();
    let windowed: Vec<Option<u64>> =
        members.iter().map(|m| config.window_caps.as_ref().and_then(|w| w.caps.get(m).copied())).collect();
    let window_ms = config.window_caps.as_ref().map(|w| i64::from(w.minutes.max(1)) * 60_000);
    let mut counted =
        Counted { day: None, day_hits: vec![0; members.len()], window: None, window_hits: vec![0; members.len()] };
    let mut main = Lane::new(config.weights.clone());
    let mut tier_lanes: BTreeMap<Tier, (Lane, Vec<usize>)> = config
        .tiers
        .iter()
        .map(|(t, w)| (*t, (Lane::new(w.clone()), w.members().iter().map(|m| index[m.as_str()]).collect())))
        .collect();
    let mut out = Replayed {
        members: members.clone(),
        expected_shares,
        sequence: Vec::new(),
        cap_hits: vec![0; members.len()],
        refused: 0,
        batches: 0,
    };
    let low_water = config.low_water as usize;
    for d in demand {
        let day = d.minute.with_timezone(&config.schedule.timezone()).date_naive();
        if counted.day != Some(day) {
            counted.day = Some(day);
            counted.day_hits.iter_mut().for_each(|h| *h = 0);
        }
        if let Some(len) = window_ms {
            let w = d.minute.timestamp_millis().div_euclid(len);
            if counted.window != Some(w) {
                counted.window = Some(w);
                counted.window_hits.iter_mut().for_each(|h| *h = 0);
            }
        }
        let base = config.schedule.weights_at(d.minute, &config.weights);
        let batch =
            config.batch_size.scaled(config.schedule.multiplier_at(d.minute), MAX_BATCH).unwrap_or(config.batch_size);
        let main_weights = if tiers_pool { Some(base.clone()) } else { without(base, &config.ejected) };
        let capped = |i: usize, c: &Counted| {
            daily[i].is_some_and(|cap| c.day_hits[i] >= cap) || windowed[i].is_some_and(|cap| c.window_hits[i] >= cap)
        };
        for _ in 0..d.draws {
            let mut served = None;
            let mut skips = 0;
            while skips < MAX_SKIPS {
                if main.tickets.len() < low_water.max(1) {
                    let refilled = main_weights.as_ref().is_some_and(|w| main.refill(w, batch, config.ordering, rng));
                    if !refilled && main.tickets.is_empty() {
                        break;
                    }
                }
                let Some(ticket) = main.tickets.pop_front() else { break };
                let member = if tiers_pool {
                    let drawn: Tier = main.weights.name(ticket).parse().unwrap_or(Tier::G);
                    match from_tier(&mut tier_lanes, drawn, config, batch, low_water, rng) {
                        Some(m) => m,
                        None => break,
                    }
                } else {
                    index[main.weights.name(ticket)]
                };
                if capped(member, &counted) {
                    out.cap_hits[member] += 1;
                    skips += 1;
                    continue;
                }
                served = Some(member);
                break;
            }
            match served {
                Some(m) => {
                    counted.day_hits[m] += 1;
                    counted.window_hits[m] += 1;
                    out.sequence.push(m as u32);
                }
                None => out.refused += 1,
            }
        }
    }
    out.batches = main.batches;
    out
}

/// The next channel of the tier that serves a ticket of `drawn` (the tier fallback over
/// the tiers that still have a channel), refilling that tier's list when it runs low.
fn from_tier(
    lanes: &mut BTreeMap<Tier, (Lane, Vec<usize>)>,
    drawn: Tier,
    config: &ReplayConfig,
    batch: BatchSize,
    low_water: usize,
    rng: &mut impl Rng,
) -> Option<usize> {
    let live = |t: Tier| config.tiers.get(&t).and_then(|w| without(w, &config.ejected)).is_some();
    let available = [live(Tier::G), live(Tier::N), live(Tier::U)];
    let tier = fallback(drawn, available)?;
    let (lane, indices) = lanes.get_mut(&tier)?;
    if lane.tickets.len() < low_water.max(1) {
        let weights = without(&config.tiers[&tier], &config.ejected)?;
        lane.refill(&weights, batch, config.ordering, rng);
    }
    lane.tickets.pop_front().map(|t| indices[t])
}

/// Each channel's share by the weights alone: its weight's share, or in a tiers pool its
/// tier's share times its share within the tier.
fn expected_shares(config: &ReplayConfig, members: &[String]) -> Vec<f64> {
    if config.tiers.is_empty() {
        return config.weights.shares();
    }
    let tier_total = config.weights.total().max(1) as f64;
    members
        .iter()
        .map(|m| {
            config
                .tiers
                .iter()
                .find_map(|(t, w)| {
                    let i = w.index_of(m)?;
                    let tier_weight = config.weights.index_of(t.as_str()).map_or(0, |j| config.weights.weight(j));
                    Some(tier_weight as f64 / tier_total * w.weight(i) as f64 / w.total().max(1) as f64)
                })
                .unwrap_or(0.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::metrics::Metrics;

    fn config(weights: &str) -> ReplayConfig {
        ReplayConfig {
            weights: Weights::parse_spec(weights).unwrap(),
            tiers: BTreeMap::new(),
            batch_size: BatchSize::new(100, MAX_BATCH).unwrap(),
            low_water: 10,
            ordering: Ordering::Smooth,
            schedule: PeakSchedule::new(PeakSchedule::parse_timezone("UTC").unwrap(), vec![]).unwrap(),
            daily_caps: BTreeMap::new(),
            window_caps: None,
            ejected: BTreeSet::new(),
        }
    }

    fn minutes(from: &str, n: i64, draws: u64) -> Vec<Demand> {
        let start: DateTime<Utc> = from.parse().unwrap();
        (0..n).map(|i| Demand { minute: start + chrono::TimeDelta::minutes(i), draws }).collect()
    }

    #[test]
    fn an_uncapped_replay_serves_every_draw_at_the_weights_within_a_ticket_per_batch() {
        let c = config("A=5,B=3,C=2");
        let r = replay(&c, &minutes("2026-12-01T10:00:00Z", 60, 37), &mut ChaCha8Rng::seed_from_u64(1));
        assert_eq!(r.sequence.len(), 60 * 37);
        assert_eq!(r.refused, 0);
        let seq: Vec<usize> = r.sequence.iter().map(|&i| i as usize).collect();
        let m = Metrics::compute(&seq, &r.expected_shares, 100);
        for e in &m.long_run_error {
            assert!(e.abs() <= 2.0, "{:?}", m.long_run_error);
        }
        assert!(m.max_window_dev <= 2.0 + 1e-9, "{}", m.max_window_dev);
        assert!(r.batches >= 22, "{}", r.batches);
    }

    #[test]
    fn a_window_cap_stops_a_member_at_its_cap_and_frees_it_in_the_next_window() {
        let mut c = config("A=9,B=1");
        c.window_caps = Some(WindowCaps { minutes: 10, caps: BTreeMap::from([("A".to_owned(), 50)]) });
        // 20 minutes, 10 draws each: windows 10:00–10:10 and 10:10–10:20.
        let r = replay(&c, &minutes("2026-12-01T10:00:00Z", 20, 10), &mut ChaCha8Rng::seed_from_u64(2));
        let first: Vec<u32> = r.sequence[..r.sequence.len() / 2].to_vec();
        let a_first = first.iter().filter(|&&m| m == 0).count();
        assert_eq!(a_first, 50, "A is held at its cap in the first window");
        let a_all = r.sequence.iter().filter(|&&m| m == 0).count();
        assert_eq!(a_all, 100, "and again at its cap in the second: {r:?}");
        assert!(r.cap_hits[0] > 0);
    }

    #[test]
    fn a_daily_cap_resets_at_the_pool_s_local_midnight() {
        let mut c = config("A=1,B=1");
        c.schedule = PeakSchedule::new(PeakSchedule::parse_timezone("Asia/Singapore").unwrap(), vec![]).unwrap();
        c.daily_caps.insert("A".into(), 5);
        // 15:58 UTC is 23:58 in Singapore: two minutes before midnight, two after.
        let d = minutes("2026-12-01T15:58:00Z", 4, 20);
        let r = replay(&c, &d, &mut ChaCha8Rng::seed_from_u64(3));
        let a_before = r.sequence[..40].iter().filter(|&&m| m == 0).count();
        let a_after = r.sequence[40..].iter().filter(|&&m| m == 0).count();
        assert_eq!((a_before, a_after), (5, 5), "{:?}", r.sequence);
        let _ = Utc.timestamp_opt(0, 0);
    }

    #[test]
    fn a_tiers_pool_replays_its_channels_by_tier_share_and_every_capped_ticket_refuses_a_draw_in_the_end() {
        let mut c = config("G=3,N=1");
        c.tiers = BTreeMap::from([
            (Tier::G, Weights::parse_spec("G1=1,G2=1").unwrap()),
            (Tier::N, Weights::parse_spec("N1=1").unwrap()),
        ]);
        let r = replay(&c, &minutes("2026-12-01T00:00:00Z", 10, 40), &mut ChaCha8Rng::seed_from_u64(4));
        assert_eq!(r.members, ["G1", "G2", "N1"]);
        let n1 = r.sequence.iter().filter(|&&m| m == 2).count() as f64 / r.sequence.len() as f64;
        assert!((n1 - 0.25).abs() < 0.02, "{n1}");
        assert_eq!(r.expected_shares, vec![0.375, 0.375, 0.25]);

        let mut all_capped = config("A=1");
        all_capped.daily_caps.insert("A".into(), 3);
        let r = replay(&all_capped, &minutes("2026-12-01T00:00:00Z", 1, 10), &mut ChaCha8Rng::seed_from_u64(5));
        assert_eq!((r.sequence.len(), r.refused), (3, 7));
    }
}
