//! Traffic replay: what a configuration would have done with the traffic a pool really
//! served. The demand (how many draws each minute asked for) runs through a simulation of
//! the pool as Redis keeps it: batches apportioned with carried remainders and ordered as
//! configured, built when the list falls below low-water (peak windows scale and reweight
//! them by the minute they are built in; the lists are replaced when the window in force
//! changes), tickets of ejected members never issued, tickets
//! of members at their daily or short-window cap skipped (at most [`MAX_SKIPS`] a draw,
//! as the draw script), a `tiers` pool's tier tickets mapped to channels by the tier
//! fallback. The simulated sequence is measured like any other ([`crate::metrics`]).
//!
//! Pure and seeded: the same configuration, demand and seed replay the same. Its cost is
//! counted in steps (a ticket taken, a ticket built, a member apportioned): a caller that
//! must stay responsive bounds it ([`replay_within`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

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

/// A replay stopped at its bound of steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the replay takes more than {limit} steps (tickets taken and built, members apportioned)")]
pub struct TooMuchWork {
    pub limit: u64,
}

/// Steps spent so far, and the most a replay may spend.
struct Budget {
    spent: u64,
    limit: u64,
}

impl Budget {
    /// Spends `steps` before the work they stand for is done: refused past the limit.
    fn charge(&mut self, steps: u64) -> Result<(), TooMuchWork> {
        self.spent = self.spent.saturating_add(steps);
        if self.spent > self.limit {
            return Err(TooMuchWork { limit: self.limit });
        }
        Ok(())
    }
}

/// One list of tickets (a pool's, or one tier's), refilled as the refiller would. A ticket
/// is kept as a key that outlives a reweight (an index into the replay's channels, or a
/// tier's index): a peak window's weights may name other members in another order than the
/// batch a queued ticket came from.
struct Lane {
    apportioner: Apportioner,
    /// The key of each member of the apportioner's weights, in their order.
    keys: Vec<usize>,
    tickets: VecDeque<usize>,
    /// The keys of the last tickets built (up to 64): the run a new batch continues.
    tail: Vec<usize>,
    batches: u64,
}

impl Lane {
    fn new(weights: &Weights, key: impl Fn(&str) -> usize) -> Self {
        Self {
            keys: weights.members().iter().map(|m| key(m)).collect(),
            apportioner: Apportioner::new(weights.clone()),
            tickets: VecDeque::new(),
            tail: Vec::new(),
            batches: 0,
        }
    }

    /// Takes the next ticket's key (one step).
    fn take(&mut self, budget: &mut Budget) -> Result<Option<usize>, TooMuchWork> {
        budget.charge(1)?;
        Ok(self.tickets.pop_front())
    }

    /// Adds one batch built now with `weights` (ejected members at zero), `batch` tickets;
    /// whether it added any. Charged before it is built: apportioning and ordering visit
    /// every member for every ticket.
    fn refill(
        &mut self,
        weights: &Weights,
        key: impl Fn(&str) -> usize,
        batch: BatchSize,
        ordering: Ordering,
        rng: &mut impl Rng,
        budget: &mut Budget,
    ) -> Result<bool, TooMuchWork> {
        let members = weights.len() as u64;
        budget.charge(u64::from(batch.get()).saturating_mul(members + 1).saturating_add(members))?;
        if self.apportioner.weights() != weights {
            self.apportioner.reweight(weights.clone());
            self.keys = weights.members().iter().map(|m| key(m)).collect();
        }
        let counts = self.apportioner.next_counts(batch);
        // The run the list ends with, in this batch's indices (none when its member is not
        // in these weights).
        // The list's last tickets in these weights' indices; none when one of them is not in
        // them (as the refiller does).
        let position: HashMap<usize, usize> = self.keys.iter().enumerate().map(|(i, &k)| (k, i)).collect();
        let tail: Option<Vec<usize>> = self.tail.iter().map(|k| position.get(k).copied()).collect();
        let tail = tail.as_deref().and_then(TailRun::of);
        let order = build_batch(ordering, &counts, tail, rng);
        if order.is_empty() {
            return Ok(false);
        }
        self.tickets.extend(order.into_iter().map(|i| self.keys[i]));
        self.tail = self.tickets.iter().skip(self.tickets.len().saturating_sub(64)).copied().collect();
        self.batches += 1;
        Ok(true)
    }
}

/// `weights` with the `ejected` members at zero; `None` when nothing is left.
fn without(weights: &Weights, ejected: &BTreeSet<String>) -> Option<Weights> {
    if ejected.is_empty() {
        return Some(weights.clone());
    }
    Weights::from_integers(weights.iter().map(|(m, w)| (m.to_owned(), if ejected.contains(m) { 0 } else { w }))).ok()
}

/// A tiers pool's main list holds tiers, kept as their index here.
const TIERS: [Tier; 3] = [Tier::G, Tier::N, Tier::U];

fn tier_key(name: &str) -> usize {
    let tier: Tier = name.parse().unwrap_or(Tier::G);
    TIERS.iter().position(|&t| t == tier).unwrap_or(0)
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
    match replay_within(config, demand, rng, u64::MAX) {
        Ok(replayed) => replayed,
        Err(TooMuchWork { .. }) => unreachable!("no replay takes u64::MAX steps"),
    }
}

/// [`replay`], refused before it takes more than `limit` steps: a candidate with many
/// members and large batches, or caps that make every draw skip, cost far more than its
/// draws. A step: a ticket taken, a member visited for a ticket built, a member's weight
/// looked at when a minute starts.
pub fn replay_within(
    config: &ReplayConfig,
    demand: &[Demand],
    rng: &mut impl Rng,
    limit: u64,
) -> Result<Replayed, TooMuchWork> {
    let mut budget = Budget { spent: 0, limit };
    let tiers_pool = !config.tiers.is_empty();
    // The channels, and for a tiers pool which tier each belongs to.
    let members: Vec<String> = if tiers_pool {
        config.tiers.values().flat_map(|w| w.members().iter().cloned()).collect()
    } else {
        config.weights.members().to_vec()
    };
    let index: HashMap<&str, usize> = members.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
    // Overrides name the pool's own members; anything else would be a channel never drawn.
    let channel_key = |m: &str| index.get(m).copied().unwrap_or(usize::MAX);
    budget.charge(members.len() as u64)?;
    let expected_shares = expected_shares(config, &members);
    let daily: Vec<Option<u64>> = members.iter().map(|m| config.daily_caps.get(m).copied()).collect();
    let windowed: Vec<Option<u64>> =
        members.iter().map(|m| config.window_caps.as_ref().and_then(|w| w.caps.get(m).copied())).collect();
    let window_ms = config.window_caps.as_ref().map(|w| i64::from(w.minutes.max(1)) * 60_000);
    let mut counted =
        Counted { day: None, day_hits: vec![0; members.len()], window: None, window_hits: vec![0; members.len()] };
    let mut main =
        if tiers_pool { Lane::new(&config.weights, tier_key) } else { Lane::new(&config.weights, channel_key) };
    // Each tier's channels without the ejected ones (the ejected set does not change), and
    // its list; which tiers still have a channel.
    budget.charge(members.len() as u64)?;
    let mut tier_lanes: BTreeMap<Tier, (Weights, Lane)> = config
        .tiers
        .iter()
        .filter_map(|(t, w)| without(w, &config.ejected).map(|live| (*t, (live, Lane::new(w, channel_key)))))
        .collect();
    let available = TIERS.map(|t| tier_lanes.contains_key(&t));
    let mut out = Replayed {
        members: members.clone(),
        expected_shares,
        sequence: Vec::new(),
        cap_hits: vec![0; members.len()],
        refused: 0,
        batches: 0,
    };
    let low_water = (config.low_water as usize).max(1);
    let mut previous: Option<Option<*const crate::peak::PeakWindow>> = None;
    for d in demand {
        let day = d.minute.with_timezone(&config.schedule.timezone()).date_naive();
        if counted.day != Some(day) {
            counted.day = Some(day);
            budget.charge(members.len() as u64)?;
            counted.day_hits.iter_mut().for_each(|h| *h = 0);
        }
        if let Some(len) = window_ms {
            let w = d.minute.timestamp_millis().div_euclid(len);
            if counted.window != Some(w) {
                counted.window = Some(w);
                budget.charge(members.len() as u64)?;
                counted.window_hits.iter_mut().for_each(|h| *h = 0);
            }
        }
        // The window in force: when it changed since the last minute, the lists are
        // replaced by fresh batches, without a seam (as the refiller rebuilds a pool).
        budget.charge(config.schedule.windows().len() as u64)?;
        let in_force = config.schedule.active_at(d.minute).map(std::ptr::from_ref);
        if previous.is_some_and(|p| p != in_force) {
            for lane in std::iter::once(&mut main).chain(tier_lanes.values_mut().map(|(_, lane)| lane)) {
                lane.tickets.clear();
                lane.tail.clear();
            }
        }
        previous = Some(in_force);
        let base = config.schedule.weights_at(d.minute, &config.weights);
        budget.charge(base.len() as u64)?;
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
                if main.tickets.len() < low_water {
                    let refilled = match &main_weights {
                        Some(w) if tiers_pool => main.refill(w, tier_key, batch, config.ordering, rng, &mut budget)?,
                        Some(w) => main.refill(w, channel_key, batch, config.ordering, rng, &mut budget)?,
                        None => false,
                    };
                    if !refilled && main.tickets.is_empty() {
                        break;
                    }
                }
                let Some(ticket) = main.take(&mut budget)? else { break };
                let member = if tiers_pool {
                    let Some(tier) = fallback(TIERS[ticket], available) else { break };
                    let Some((live, lane)) = tier_lanes.get_mut(&tier) else { break };
                    if lane.tickets.len() < low_water {
                        lane.refill(live, channel_key, batch, config.ordering, rng, &mut budget)?;
                    }
                    match lane.take(&mut budget)? {
                        Some(m) => m,
                        None => break,
                    }
                } else {
                    ticket
                };
                if member >= members.len() {
                    // Not one of the pool's channels (see channel_key): never served.
                    skips += 1;
                    continue;
                }
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
    Ok(out)
}

/// Each channel's share by the weights alone: its weight's share, or in a tiers pool its
/// tier's share times its share within the tier.
fn expected_shares(config: &ReplayConfig, members: &[String]) -> Vec<f64> {
    if config.tiers.is_empty() {
        return config.weights.shares();
    }
    // `members` is the tiers' channels in the tiers' order.
    let tier_total = config.weights.total().max(1) as f64;
    let shares: Vec<f64> = config
        .tiers
        .iter()
        .flat_map(|(t, w)| {
            let tier_weight = config.weights.index_of(t.as_str()).map_or(0, |j| config.weights.weight(j));
            let within = w.total().max(1) as f64;
            w.weights().iter().map(move |&c| tier_weight as f64 / tier_total * c as f64 / within)
        })
        .collect();
    debug_assert_eq!(shares.len(), members.len());
    shares
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

    #[test]
    fn a_peak_window_naming_fewer_members_in_another_order_replaces_the_lists_when_it_opens_and_closes() {
        // 10:30–11:00 weights C=1,A=1: B is not in them, and C comes first.
        let mut c = config("A=5,B=3,C=2");
        let at = |t: &str| crate::peak::parse_local_time(t).unwrap();
        let window =
            crate::peak::PeakWindow::new(at("10:30"), at("11:00"), 1, Some(Weights::parse_spec("C=1,A=1").unwrap()))
                .unwrap();
        c.schedule = PeakSchedule::new(PeakSchedule::parse_timezone("UTC").unwrap(), vec![window]).unwrap();
        let r = replay(&c, &minutes("2026-12-01T10:00:00Z", 60, 37), &mut ChaCha8Rng::seed_from_u64(7));
        assert_eq!(r.sequence.len(), 60 * 37);
        let (before, peak) = r.sequence.split_at(30 * 37);
        let count = |s: &[u32], m: u32| s.iter().filter(|&&x| x == m).count() as f64;
        // Before the window: 5:3:2 within a ticket a batch.
        for (m, share) in [(0, 0.5), (1, 0.3), (2, 0.2)] {
            assert!((count(before, m) - share * before.len() as f64).abs() <= 12.0, "{m}: {before:?}");
        }
        // In it: the lists are replaced when it opens (as the refiller rebuilds them), so
        // from its first draw A and C alike, and B never.
        assert_eq!(count(peak, 1), 0.0, "B has no weight in the window: {peak:?}");
        assert!((count(peak, 0) - count(peak, 2)).abs() <= 2.0, "{peak:?}");
        // Closed again at 11:00: the next hour is 5:3:2 from its first draw.
        let after = replay(&c, &minutes("2026-12-01T10:59:00Z", 2, 37), &mut ChaCha8Rng::seed_from_u64(7));
        assert_eq!(count(&after.sequence[..37], 1), 0.0, "10:59 is in the window");
        assert!(count(&after.sequence[37..], 1) >= 10.0, "11:00 is not: {:?}", after.sequence);
    }

    #[test]
    fn a_replay_over_its_bound_of_steps_is_refused_and_one_within_it_is_the_unbounded_replay() {
        let c = config("A=5,B=3,C=2");
        let d = minutes("2026-12-01T10:00:00Z", 10, 100);
        let free = replay(&c, &d, &mut ChaCha8Rng::seed_from_u64(6));
        let bounded = replay_within(&c, &d, &mut ChaCha8Rng::seed_from_u64(6), 10_000).unwrap();
        assert_eq!(bounded, free, "1,000 draws of batches of 100 among 3: about 5,000 steps");
        // Every ticket of a capped member is skipped: each draw takes many more steps.
        let mut capped = config("A=99,B=1");
        capped.daily_caps.insert("A".into(), 1);
        let refused = replay_within(&capped, &d, &mut ChaCha8Rng::seed_from_u64(6), 10_000).unwrap_err();
        assert_eq!(refused, TooMuchWork { limit: 10_000 });
        // 5,000 members in batches of 100,000: the first batch alone is 5e8 steps, refused
        // before it is apportioned.
        let mut many = config("A=1");
        many.weights = Weights::from_integers((0..5_000).map(|i| (format!("M{i}"), 1))).unwrap();
        many.batch_size = BatchSize::new(100_000, MAX_BATCH).unwrap();
        let one_draw = minutes("2026-12-01T10:00:00Z", 1, 1);
        let refused = replay_within(&many, &one_draw, &mut ChaCha8Rng::seed_from_u64(6), 50_000_000).unwrap_err();
        assert_eq!(refused, TooMuchWork { limit: 50_000_000 });
    }
}
