//! Adaptive tiers: re-rating a tiers pool's channels into G / N / U from their success
//! rate, one window at a time, with hysteresis and a cool-down.
//!
//! A channel's rate in a window points it at a tier by two boundaries (`good_at_least`,
//! `normal_at_least`), widened by `margin` in favour of the tier it is in: to leave G it
//! must fall below `good − margin`, to climb into G it must reach `good + margin` (and the
//! same around `normal`). A window pointing away from its tier counts towards a move in that
//! direction; a window pointing at its tier resets the count; a window with fewer outcomes
//! than `min_volume` decides nothing and leaves the count as it is. After `windows`
//! consecutive windows pointing the same way, the channel moves one tier that way (G → N,
//! N → U, or back up), unless it moved less than `cooldown_ms` ago; then it waits.
//!
//! Pure and clocked by the caller: what a channel's history leads to is decided here, what
//! happens with a move (applied at once, or offered to a person as a suggestion) is the
//! caller's. A suggestion counts as a move for the cool-down, so it is not offered again
//! every window.

use serde::{Deserialize, Serialize};

use crate::health::{PolicyError, Window};
use crate::tier::Tier;

/// What a pool's tier policy does with the moves it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TierMode {
    /// No re-rating.
    #[default]
    Off,
    /// Moves are offered on the pool's page for a person to accept; nothing changes alone.
    Suggest,
    /// Moves are applied as they are found (each an audited change).
    Automatic,
}

/// A pool's tier policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierPolicy {
    pub mode: TierMode,
    /// Minutes of outcomes judged at once.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub window_minutes: u32,
    /// Fewer outcomes than this in a window: no decision.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub min_volume: u64,
    /// A rate at or above this points at G.
    pub good_at_least: f64,
    /// A rate at or above this (and below `good_at_least`) points at N; below it, U.
    pub normal_at_least: f64,
    /// How far past a boundary a rate must be to leave the tier it is in.
    pub margin: f64,
    /// Consecutive windows pointing one way before a channel moves.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub windows: u32,
    /// At most one move per channel per this many ms.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub cooldown_ms: i64,
}

impl Default for TierPolicy {
    fn default() -> Self {
        Self {
            mode: TierMode::Off,
            window_minutes: 5,
            min_volume: 50,
            good_at_least: 0.95,
            normal_at_least: 0.8,
            margin: 0.02,
            windows: 3,
            cooldown_ms: 30 * 60_000,
        }
    }
}

impl TierPolicy {
    /// Checks every field's range, and that the boundaries with their margins do not
    /// overlap (what a stored policy must hold; a new one also [`Self::validate_new`]).
    pub fn validate(&self) -> Result<(), PolicyError> {
        let check = PolicyError::unless;
        check((1..=60).contains(&self.window_minutes), "window_minutes", "must be in 1..=60")?;
        check((1..=crate::health::MAX_VOLUME).contains(&self.min_volume), "min_volume", "must be in 1..=2^53-1")?;
        check((0.0..=1.0).contains(&self.good_at_least), "good_at_least", "must be in 0..=1")?;
        check((0.0..=1.0).contains(&self.normal_at_least), "normal_at_least", "must be in 0..=1")?;
        check((0.0..=0.5).contains(&self.margin), "margin", "must be in 0..=0.5")?;
        check(
            self.normal_at_least + 2.0 * self.margin <= self.good_at_least,
            "normal_at_least",
            "must be below good_at_least by at least twice the margin",
        )?;
        check((1..=100).contains(&self.windows), "windows", "must be in 1..=100")?;
        check((0..=7 * 86_400_000).contains(&self.cooldown_ms), "cooldown_ms", "must be in 0..=604800000")?;
        Ok(())
    }

    /// A window's success rate and the tier it points at, when it decides (enough outcomes)
    /// and does not point a channel in `current` towards `toward` (it points at `current`, or
    /// the other way): the window that withdraws a move to `toward` offered before it.
    pub fn not_toward(&self, current: Tier, toward: Tier, window: Window) -> Option<(f64, Tier)> {
        let rate = window.success_rate().filter(|_| window.volume() >= self.min_volume)?;
        let pointed = self.points_at(current, rate);
        let way = |t: Tier| rank(t).cmp(&rank(current));
        (way(pointed) == std::cmp::Ordering::Equal || way(pointed) != way(toward)).then_some((rate, pointed))
    }

    /// [`Self::validate`], and that every tier can be reached: a policy being set (one
    /// stored before this rule keeps being judged as it is).
    pub fn validate_new(&self) -> Result<(), PolicyError> {
        self.validate()?;
        // Climbing into G takes good_at_least + margin (as `points_at` adds them): above 1
        // no rate reaches it.
        PolicyError::unless(
            self.good_at_least + self.margin <= 1.0,
            "good_at_least",
            "must be at most 1 − margin (a channel in N could never climb into G)",
        )?;
        // Falling into U takes a rate below normal_at_least − margin: at 0 or below none is.
        PolicyError::unless(
            self.normal_at_least - self.margin > 0.0,
            "normal_at_least",
            "must be above margin (a channel in N could never fall into U)",
        )
    }

    /// The tier a window's `rate` points a channel in `current` at (the margins favour
    /// `current`).
    pub fn points_at(&self, current: Tier, rate: f64) -> Tier {
        let above = |boundary: f64, inside: bool| {
            if inside {
                rate >= boundary - self.margin
            } else {
                rate >= boundary + self.margin
            }
        };
        let above_good = above(self.good_at_least, current == Tier::G);
        let above_normal = above(self.normal_at_least, current != Tier::U);
        match (above_good, above_normal) {
            (true, true) => Tier::G,
            (_, true) => Tier::N,
            _ => Tier::U,
        }
    }
}

/// Which way a channel's windows point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Up,
    Down,
}

fn rank(tier: Tier) -> u8 {
    match tier {
        Tier::G => 2,
        Tier::N => 1,
        Tier::U => 0,
    }
}

fn step(tier: Tier, direction: Direction) -> Tier {
    match (tier, direction) {
        (Tier::U, Direction::Up) => Tier::N,
        (Tier::N | Tier::G, Direction::Up) => Tier::G,
        (Tier::G, Direction::Down) => Tier::N,
        (Tier::N | Tier::U, Direction::Down) => Tier::U,
    }
}

/// What a channel's recent windows have said: kept by the caller between evaluations.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Streak {
    /// Which way the windows since the last reset point.
    pub direction: Option<Direction>,
    /// Their success rates, oldest first (at most `windows` of them).
    pub rates: Vec<f64>,
    /// When the channel last moved (or was offered a move), ms.
    pub last_move_ms: Option<i64>,
}

/// A move one channel's windows call for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierMove {
    pub from: Tier,
    pub to: Tier,
    /// The success rates of the windows that called for it, oldest first.
    pub rates: Vec<f64>,
}

/// One window of a channel in tier `current`, judged at `now_ms`: the streak to keep, and
/// the move it calls for, if any (`None` also while the cool-down holds it).
pub fn judge(
    policy: &TierPolicy,
    current: Tier,
    streak: &Streak,
    window: Window,
    now_ms: i64,
) -> (Streak, Option<TierMove>) {
    let mut next = streak.clone();
    let rate = match window.success_rate() {
        Some(rate) if window.volume() >= policy.min_volume => rate,
        _ => return (next, None),
    };
    let target = policy.points_at(current, rate);
    let direction = match rank(target).cmp(&rank(current)) {
        std::cmp::Ordering::Equal => {
            next.direction = None;
            next.rates.clear();
            return (next, None);
        }
        std::cmp::Ordering::Greater => Direction::Up,
        std::cmp::Ordering::Less => Direction::Down,
    };
    if next.direction != Some(direction) {
        next.direction = Some(direction);
        next.rates.clear();
    }
    next.rates.push(rate);
    let keep = policy.windows as usize;
    if next.rates.len() > keep {
        next.rates.drain(..next.rates.len() - keep);
    }
    let cooled = next.last_move_ms.is_none_or(|at| now_ms - at >= policy.cooldown_ms);
    if next.rates.len() < keep || !cooled {
        return (next, None);
    }
    let moved = TierMove { from: current, to: step(current, direction), rates: std::mem::take(&mut next.rates) };
    next.direction = None;
    next.last_move_ms = Some(now_ms);
    (next, Some(moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINUTE: i64 = 60_000;

    fn policy() -> TierPolicy {
        TierPolicy { mode: TierMode::Automatic, windows: 3, cooldown_ms: 30 * MINUTE, ..TierPolicy::default() }
    }

    fn window(rate: f64) -> Window {
        let ok = (rate * 1000.0).round() as u64;
        Window { ok, fail: 1000 - ok }
    }

    /// Judges `rates` one window (5 minutes) apart from `start`, as tier moves apply.
    fn run(policy: &TierPolicy, mut tier: Tier, rates: &[f64]) -> (Tier, Vec<(usize, TierMove)>) {
        let mut streak = Streak::default();
        let mut moves = Vec::new();
        for (i, rate) in rates.iter().enumerate() {
            let (next, moved) = judge(policy, tier, &streak, window(*rate), i as i64 * 5 * MINUTE);
            streak = next;
            if let Some(m) = moved {
                tier = m.to;
                moves.push((i, m));
            }
        }
        (tier, moves)
    }

    #[test]
    fn a_channel_failing_for_n_windows_moves_from_g_to_n_and_not_earlier() {
        let p = policy();
        let (tier, moves) = run(&p, Tier::G, &[0.99, 0.85, 0.86]);
        assert_eq!((tier, moves.len()), (Tier::G, 0), "two failing windows are not enough");
        let (tier, moves) = run(&p, Tier::G, &[0.99, 0.85, 0.86, 0.84]);
        assert_eq!(tier, Tier::N);
        assert_eq!(moves.len(), 1);
        let (at, m) = &moves[0];
        assert_eq!((*at, m.from, m.to), (3, Tier::G, Tier::N));
        assert_eq!(m.rates, vec![0.85, 0.86, 0.84], "the measured rates go in the reason");
    }

    #[test]
    fn hysteresis_holds_a_channel_that_hovers_at_its_boundary() {
        let p = policy();
        // Around 0.95 ± less than the margin: G stays G, N stays N.
        let hover = [0.94, 0.96, 0.935, 0.95, 0.94, 0.94, 0.94, 0.96];
        assert_eq!(run(&p, Tier::G, &hover), (Tier::G, vec![]));
        assert_eq!(run(&p, Tier::N, &hover), (Tier::N, vec![]));
        // One good window resets a failing count.
        assert_eq!(run(&p, Tier::G, &[0.8, 0.8, 0.99, 0.8, 0.8]).1.len(), 0);
    }

    #[test]
    fn at_most_one_move_per_cool_down_and_one_tier_at_a_time() {
        let p = policy();
        // Collapsing to 10 %: G → N after three windows, N → U only after the cool-down.
        let (tier, moves) = run(&p, Tier::G, &[0.1; 12]);
        assert_eq!(tier, Tier::U);
        let at: Vec<usize> = moves.iter().map(|(i, _)| *i).collect();
        assert_eq!(at, vec![2, 8], "the second move waits 30 minutes (6 windows) after the first");
        assert_eq!((moves[0].1.to, moves[1].1.to), (Tier::N, Tier::U));
        // And back up once the channel recovers.
        let (tier, _) = run(&p, Tier::U, &[0.99; 12]);
        assert_eq!(tier, Tier::G);
    }

    #[test]
    fn too_few_outcomes_decide_nothing_and_keep_the_count() {
        let p = policy();
        let quiet = Window { ok: 1, fail: 9 };
        let (s1, _) = judge(&p, Tier::G, &Streak::default(), window(0.5), 0);
        let (s2, m) = judge(&p, Tier::G, &s1, quiet, 5 * MINUTE);
        assert_eq!((s2.clone(), m), (s1, None));
        let (s3, _) = judge(&p, Tier::G, &s2, window(0.5), 10 * MINUTE);
        let (_, m) = judge(&p, Tier::G, &s3, window(0.5), 15 * MINUTE);
        assert_eq!(m.map(|m| m.to), Some(Tier::N));
    }

    #[test]
    fn a_deciding_window_at_the_channel_s_tier_or_pointing_the_other_way_is_not_toward_a_move() {
        let p = policy();
        assert_eq!(p.not_toward(Tier::G, Tier::N, window(0.94)), Some((0.94, Tier::G)), "inside G's margin");
        assert_eq!(p.not_toward(Tier::G, Tier::N, window(0.9)), None, "points at N: toward the move");
        assert_eq!(p.not_toward(Tier::G, Tier::N, window(0.5)), None, "points at U: the move's way");
        assert_eq!(p.not_toward(Tier::N, Tier::G, window(0.96)), Some((0.96, Tier::N)), "below G plus the margin");
        assert_eq!(p.not_toward(Tier::N, Tier::U, window(0.99)), Some((0.99, Tier::G)), "the other way");
        assert_eq!(p.not_toward(Tier::G, Tier::N, Window { ok: 10, fail: 0 }), None, "too few outcomes");
    }

    #[test]
    fn policies_are_refused_naming_the_field() {
        assert!(TierPolicy::default().validate().is_ok());
        let bad = |p: TierPolicy| p.validate().unwrap_err().field;
        assert_eq!(bad(TierPolicy { windows: 0, ..TierPolicy::default() }), "windows");
        assert_eq!(bad(TierPolicy { normal_at_least: 0.94, ..TierPolicy::default() }), "normal_at_least");
        assert_eq!(bad(TierPolicy { margin: 0.6, ..TierPolicy::default() }), "margin");
        let unreachable = TierPolicy { good_at_least: 0.99, ..TierPolicy::default() };
        assert!(unreachable.validate().is_ok(), "stored before the rule: still judged");
        assert_eq!(unreachable.validate_new().unwrap_err().field, "good_at_least", "0.99 + 0.02 > 1");
        assert!(TierPolicy { good_at_least: 0.98, ..TierPolicy::default() }.validate_new().is_ok(), "0.98 + 0.02 = 1");
        let floorless = TierPolicy { normal_at_least: 0.01, margin: 0.02, ..TierPolicy::default() };
        assert!(floorless.validate().is_ok(), "stored before the rule: still judged");
        assert_eq!(floorless.validate_new().unwrap_err().field, "normal_at_least", "0.01 − 0.02 ≤ 0: never U");
        let parsed: TierPolicy =
            serde_json::from_value(serde_json::json!({"mode": "suggest", "windows": 4.0})).unwrap();
        assert_eq!((parsed.mode, parsed.windows), (TierMode::Suggest, 4));
        assert!(serde_json::from_value::<TierPolicy>(serde_json::json!({"mode": "sometimes"})).is_err());
    }

    proptest! {
        #[test]
        fn moves_are_adjacent_spaced_by_the_cool_down_and_follow_n_windows_pointing_their_way(
            rates in prop::collection::vec(0.0f64..=1.0, 1..120),
            windows in 1u32..5,
            cooldown_windows in 0i64..8,
        ) {
            let p = TierPolicy { windows, cooldown_ms: cooldown_windows * 5 * MINUTE, ..policy() };
            let mut tier = Tier::G;
            let mut streak = Streak::default();
            let mut last_move: Option<i64> = None;
            for (i, rate) in rates.iter().enumerate() {
                let now = i as i64 * 5 * MINUTE;
                let before = tier;
                let (next, moved) = judge(&p, tier, &streak, window(*rate), now);
                streak = next;
                if let Some(m) = moved {
                    prop_assert_eq!(m.from, before);
                    prop_assert_eq!(rank(m.from).abs_diff(rank(m.to)), 1, "one tier at a time");
                    prop_assert!(last_move.is_none_or(|at| now - at >= p.cooldown_ms));
                    prop_assert_eq!(m.rates.len(), windows as usize);
                    // Every window that called for it pointed the way it went.
                    let up = rank(m.to) > rank(m.from);
                    for r in &m.rates {
                        let pointed = p.points_at(m.from, *r);
                        let went_its_way = if up { rank(pointed) > rank(m.from) } else { rank(pointed) < rank(m.from) };
                        prop_assert!(went_its_way, "rate {} pointed at {:?}", r, pointed);
                    }
                    last_move = Some(now);
                    tier = m.to;
                }
            }
        }
    }
}
