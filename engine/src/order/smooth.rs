//! The `smooth` ordering: randomised SWRR with an exact deadline look-ahead, without
//! walking the look-ahead at every step.
//!
//! Every member earns its count as credit each step; the step's ticket goes, at random in
//! proportion to credit, to one of the *eligible* members: positive credit (so counts are
//! exact by construction) and, when the look-ahead binds, a ticket falling due within the
//! binding horizon. Member k's j-th ticket falls due at step `⌈j·B/c_k⌉` (1-based); the
//! look-ahead binds at the first step `T` whose slots up to `T` are all needed by tickets
//! falling due by `T`. That keeps every member's running count within one ticket of its
//! ideal at every prefix (see the parent module for what the bound gives and how it is
//! tested).
//!
//! How the horizon is found without walking it. Write `T` for an absolute step after the
//! current one (`s`), `G(T) = T − Σ_k ⌊T·c_k/B⌋` (static for the batch: the slots up to `T`
//! that no ticket falling due by `T` claims, an integer in `[0, m)`), and `A(T)` for the number of tickets
//! already handed out that fall due after `T` (tickets given early). The free slots up to
//! `T` are `slack(T) = (T − s) − (tickets due by T not handed out) = G(T) − A(T)`, since
//! `s` tickets have been handed out. So the slack of a fixed `T` only ever goes down —
//! by one for each ticket handed out early past it — and the horizon is the first `T`
//! with `slack(T) ≤ 0`. [`Deadlines`] keeps the slack of every step, takes the range
//! decrement when a ticket is handed out early (`O(how early)`, so `O(m·B)` per batch at
//! worst and far less in practice) and caches the first tight step, rescanning only after
//! passing it. Steps where no early ticket is outstanding (`A(T) = 0`) are never tight in
//! this sense even when `G(T) = 0`; binding there admits exactly the members with positive
//! credit, which is what "no horizon" admits too.
//!
//! Choosing among the eligible members is the same draw in every path — one
//! `below(rng, total)` (a uniform draw below the total) and the first member, in member order, whose running credit
//! sum exceeds it — so for a given seed every path gives the same batch as the original
//! step-by-step walk (kept in the tests as the reference and compared exactly, generator
//! state included):
//! - up to [`FEW_MAX`] (three) members, the horizon can only bind at the current step, so
//!   it is decided there without the free-slot table ([`by_few`] shows why);
//! - up to [`SCAN_MAX`] members, a branch-free scan over per-member arrays;
//! - above it, members with positive credit live in a Fenwick tree of `(count, given)`
//!   (a member's credit at step `s` is `(s+1)·c_k − B·n_k`, so node sums stay valid as `s`
//!   advances), woken from per-step buckets when their credit turns positive; when the
//!   horizon binds, the eligible members are read from per-due-step buckets instead.

use rand::Rng;

mod tables;

use tables::{CreditTree, Deadlines, DueClock};

/// A uniform draw from `0..n` (`n > 0`): Lemire's multiply-and-shift on one 32-bit word,
/// rejecting the few low values that would bias it, so a batch consumes half the random
/// output of a 64-bit draw; above `u32::MAX` the generic range draw.
#[inline]
pub(super) fn below(rng: &mut impl Rng, n: i64) -> i64 {
    debug_assert!(n > 0);
    if n > i64::from(u32::MAX) {
        return rng.random_range(0..n);
    }
    let n32 = n as u32;
    let mut m = u64::from(rng.next_u32()) * u64::from(n32);
    if (m as u32) < n32 {
        let threshold = n32.wrapping_neg() % n32;
        while (m as u32) < threshold {
            m = u64::from(rng.next_u32()) * u64::from(n32);
        }
    }
    (m >> 32) as i64
}

/// Up to this many members the horizon is read from when each member's last ticket falls
/// due ([`by_few`]), without the per-batch slack table.
const FEW_MAX: usize = 3;

/// Up to this many members a step scans them all; above it a step costs `O(log m)`.
const SCAN_MAX: usize = 32;

/// The widest scan compiled (lanes of the fixed-size arrays).
const SCAN_LIMIT: usize = 32;

/// Longest binding horizon the many-member path reads from due buckets; a longer one
/// (rare: the horizon is usually a few steps) scans every member instead.
const ENUMERATE_MAX: i64 = 64;

/// Which path handles which batch; tests force each path on the same batches.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    few_max: usize,
    scan_max: usize,
    enumerate_max: i64,
}

const TUNING: Tuning = Tuning { few_max: FEW_MAX, scan_max: SCAN_MAX, enumerate_max: ENUMERATE_MAX };

/// See [`super::smooth`].
pub(super) fn smooth(counts: &[u64], avoid_first: Option<usize>, rng: &mut impl Rng) -> Vec<usize> {
    smooth_with(counts, avoid_first, rng, TUNING)
}

fn smooth_with(counts: &[u64], avoid_first: Option<usize>, rng: &mut impl Rng, tuning: Tuning) -> Vec<usize> {
    let active: Vec<usize> = (0..counts.len()).filter(|&i| counts[i] > 0).collect();
    let weight: Vec<i64> = active.iter().map(|&i| counts[i] as i64).collect();
    // The first step's seam guard, as a position among the active members.
    let avoid = avoid_first.and_then(|member| active.iter().position(|&a| a == member));
    let batch = weight.iter().sum::<i64>() as usize;
    if batch > 0 && active.len() <= tuning.few_max.min(FEW_MAX) {
        let mut out = vec![0; batch];
        by_few(&weight, avoid, rng, &mut out);
        for ticket in &mut out {
            *ticket = active[*ticket];
        }
        return out;
    }
    let mut out = Vec::with_capacity(batch);
    if batch > 0 {
        let emit = |k: usize| out.push(active[k]);
        if active.len() <= tuning.scan_max.min(SCAN_LIMIT) {
            match active.len() {
                0 | 1 => by_scan::<1>(&weight, avoid, rng, emit),
                2 => by_scan::<2>(&weight, avoid, rng, emit),
                3 => by_scan::<3>(&weight, avoid, rng, emit),
                4 => by_scan::<4>(&weight, avoid, rng, emit),
                5..=8 => by_scan::<8>(&weight, avoid, rng, emit),
                9..=16 => by_scan::<16>(&weight, avoid, rng, emit),
                _ => by_scan::<SCAN_LIMIT>(&weight, avoid, rng, emit),
            }
        } else {
            by_index(&weight, avoid, rng, tuning.enumerate_max, emit);
        }
    }
    out
}

/// Up to [`FEW_MAX`] members: the same steps and draws as [`by_scan`], with the horizon
/// decided from the current step alone, without the slack table.
///
/// Why that is exact. A member is only handed a ticket while behind, so at most one of
/// its tickets is early at a time: its last, falling due at `p_k`; an early member has
/// negative credit, so it is never eligible. Hence `A(T) = #{k : p_k > T}`, and (the
/// counts summing to B) `G(T) = Σ_k (T·c_k mod B)/B ≤ m − 1 ≤ 2`. With two members early
/// the current step is tight. With none, no step is. With one, say the first tight step
/// `T*` is later than the current one: slack drops there, which takes an unhanded ticket
/// due at `T*` from each of two members (`G` and `A` each move by one ticket at a time),
/// and those can only be the two members not early; their next tickets fall due by `T*`,
/// so the horizon excludes no one. So the horizon binds only when the current step `s1`
/// is tight, `G(s1) ≤ A(s1)`, and then it admits the members due at `s1`.
///
/// Every member's state stays in registers (updated by mask, not by index), so a step
/// waits on little more than the draw. Writes member positions (indices into `weight`) to
/// `out`, one per ticket.
fn by_few(weight: &[i64], avoid: Option<usize>, rng: &mut impl Rng, out: &mut [usize]) {
    const L: usize = FEW_MAX;
    let m = weight.len();
    debug_assert!((1..=L).contains(&m));
    let b: i64 = weight.iter().sum();
    let mut count = [0i64; L];
    count[..m].copy_from_slice(weight);
    // Unused lanes: no count, so never positive credit, never due.
    let mut clock = count.map(|c| DueClock::new(c.max(1), b));
    let mut due = [i64::MAX; L];
    let mut due_after = [i64::MAX; L];
    for k in 0..m {
        due[k] = clock[k].due();
        clock[k].advance();
        due_after[k] = clock[k].due();
    }
    let mut credit = [0i64; L];
    // When each member's last ticket falls due (0 before its first).
    let mut last_due = [0i64; L];
    // `s1·c_k mod B` for the first two lanes; the third's is the complement of their sum
    // mod B, so `G(s1) ≤ 1` exactly when these two sum to at most B.
    let mut rem = [count[0] % b, count[1] % b];
    for (step, slot) in out.iter_mut().enumerate() {
        let s1 = step as i64 + 1;
        let early: usize = last_due.iter().map(|&p| usize::from(p > s1)).sum();
        let low = rem[0] + rem[1] <= b;
        let tight = (early >= 2) | ((early == 1) & low);
        let horizon = if tight { s1 } else { i64::MAX };
        let mut value = [0i64; L];
        let mut total = 0;
        for k in 0..L {
            credit[k] += count[k];
            let eligible = (credit[k] > 0) & (due[k] <= horizon);
            value[k] = credit[k] & -i64::from(eligible);
            total += value[k];
        }
        if step == 0 {
            total -= seam_guard(&mut value, total, avoid);
        }
        let chosen = if total == 0 {
            furthest_behind(m, |k| credit[k])
        } else {
            let x = below(rng, total);
            // The first member whose running sum exceeds x: the count of sums not above it
            // (the last lane's sum is the total, above x).
            let mut running = 0;
            let mut chosen = 0;
            for &v in &value[..L - 1] {
                running += v;
                chosen += usize::from(running <= x);
            }
            chosen
        };
        for k in 0..L {
            let picked = k == chosen;
            credit[k] -= b & -i64::from(picked);
            last_due[k] = if picked { due[k] } else { last_due[k] };
            due[k] = if picked { due_after[k] } else { due[k] };
        }
        let lane = chosen.min(L - 1);
        clock[lane].advance();
        due_after[lane] = clock[lane].due();
        for (r, &c) in rem.iter_mut().zip(&count) {
            *r += c;
            *r -= b & -i64::from(*r >= b);
        }
        *slot = chosen;
    }
}

/// Few members: each step updates and scans every member, in a fixed-size array of
/// lanes (`N`; unused lanes never become eligible) and without branches on the data.
/// One lane holds all of a member's state, so a step's reads of what the previous step
/// wrote are plain scalar loads (no wide load over a narrow store).
fn by_scan<const N: usize>(weight: &[i64], avoid: Option<usize>, rng: &mut impl Rng, mut emit: impl FnMut(usize)) {
    let m = weight.len();
    let b: i64 = weight.iter().sum();
    let mut deadlines = Deadlines::new(weight);
    let mut lanes = [Lane::UNUSED; N];
    for (lane, &c) in lanes.iter_mut().zip(weight) {
        let clock = DueClock::new(c, b);
        *lane = Lane { credit: 0, count: c, due: clock.due(), clock };
    }
    let mut value = [0i64; N];
    for step in 0..b as usize {
        let horizon = deadlines.horizon(step);
        let mut total = 0;
        for (lane, v) in lanes.iter_mut().zip(&mut value) {
            lane.credit += lane.count;
            let eligible = (lane.credit > 0) & (lane.due <= horizon);
            *v = lane.credit & -i64::from(eligible);
            total += *v;
        }
        if step == 0 {
            total -= seam_guard(&mut value, total, avoid);
        }
        let chosen = if total == 0 {
            furthest_behind(m, |k| lanes[k].credit)
        } else {
            let x = below(rng, total);
            // The first member whose running sum exceeds x: the count of sums not above it.
            let mut running = 0;
            let mut chosen = 0;
            for &v in &value {
                running += v;
                chosen += usize::from(running <= x);
            }
            chosen.min(N - 1)
        };
        let lane = &mut lanes[chosen];
        lane.credit -= b;
        deadlines.hand_out(step, lane.due);
        lane.clock.advance();
        lane.due = lane.clock.due();
        emit(chosen);
    }
}

/// One member's state in [`by_scan`]: `credit = t·c − B·n` before step t+1 (positive
/// means behind the ideal), its count, and when its next ticket falls due.
#[derive(Debug, Clone, Copy)]
struct Lane {
    credit: i64,
    count: i64,
    due: i64,
    clock: DueClock,
}

impl Lane {
    /// A lane without a member: no credit, no count, never due.
    const UNUSED: Lane = Lane {
        credit: 0,
        count: 0,
        due: i64::MAX,
        clock: DueClock { whole: 0, part: 0, step_whole: 0, step_part: 0, count: 1 },
    };
}

/// Many members: positive-credit members in a Fenwick tree, binding horizons read from
/// due buckets. Falls back to an exact scan of every member for the first step (seam
/// guard), for long horizons, and for good if a member were ever left past its due step
/// (the due buckets then no longer hold every member due by the horizon).
#[allow(clippy::needless_range_loop)] // parallel per-member arrays, indexed together
fn by_index(weight: &[i64], avoid: Option<usize>, rng: &mut impl Rng, enumerate_max: i64, mut emit: impl FnMut(usize)) {
    const NONE: u32 = u32::MAX;
    let m = weight.len();
    let b: i64 = weight.iter().sum();
    let batch = b as usize;
    let mut deadlines = Deadlines::new(weight);
    let mut clocks: Vec<DueClock> = weight.iter().map(|&c| DueClock::new(c, b)).collect();
    let mut due: Vec<i64> = clocks.iter().map(DueClock::due).collect();
    let mut given = vec![0i64; m];
    // Every member starts with positive credit (its count) and none handed out.
    let mut positive = vec![true; m];
    let mut tree = CreditTree::new(weight);
    // Members whose credit turns positive at step t (singly linked through `wake_next`).
    let mut wake_head = vec![NONE; batch + 1];
    let mut wake_next = vec![NONE; m];
    // Members by the step their next ticket falls due; entries go stale when the member is
    // handed a ticket (its due moves on) and are skipped by checking `due`.
    let mut due_head = vec![NONE; batch + 2];
    let mut due_entries: Vec<(u32, u32)> = Vec::with_capacity(m + batch);
    fn file_due(k: usize, at: i64, head: &mut [u32], entries: &mut Vec<(u32, u32)>) {
        entries.push((k as u32, head[at as usize]));
        head[at as usize] = (entries.len() - 1) as u32;
    }
    for k in 0..m {
        file_due(k, due[k], &mut due_head, &mut due_entries);
    }
    let mut overdue = false;
    let mut candidates: Vec<usize> = Vec::new();
    for step in 0..batch {
        let mut k = std::mem::replace(&mut wake_head[step], NONE);
        while k != NONE {
            let member = k as usize;
            positive[member] = true;
            tree.add(member, weight[member], given[member]);
            k = wake_next[member];
        }
        let s1 = step as i64 + 1;
        let horizon = deadlines.horizon(step);
        let credit = |k: usize| s1 * weight[k] - b * given[k];
        let chosen = if step == 0 || overdue || (horizon != i64::MAX && horizon - step as i64 > enumerate_max) {
            let eligible = |k: usize| positive[k] && due[k] <= horizon;
            choose_by_scan(m, credit, eligible, if step == 0 { avoid } else { None }, rng)
        } else if horizon == i64::MAX {
            let x = below(rng, tree.total(s1, b));
            tree.find(x, s1, b)
        } else {
            candidates.clear();
            for t in s1..=horizon {
                let mut e = due_head[t as usize];
                while e != NONE {
                    let (member, next) = due_entries[e as usize];
                    let member = member as usize;
                    if due[member] == t && positive[member] {
                        candidates.push(member);
                    }
                    e = next;
                }
            }
            candidates.sort_unstable();
            let total: i64 = candidates.iter().map(|&k| credit(k)).sum();
            if total == 0 {
                furthest_behind(m, credit)
            } else {
                let mut x = below(rng, total);
                let mut chosen = candidates[candidates.len() - 1];
                for &k in &candidates {
                    if x < credit(k) {
                        chosen = k;
                        break;
                    }
                    x -= credit(k);
                }
                chosen
            }
        };
        if positive[chosen] {
            positive[chosen] = false;
            tree.add(chosen, -weight[chosen], -given[chosen]);
        }
        given[chosen] += 1;
        deadlines.hand_out(step, due[chosen]);
        // Credit turns positive again at the step ⌊n·B/c⌋ (n = tickets now given).
        let wake = clocks[chosen].whole_steps().max(s1);
        clocks[chosen].advance();
        due[chosen] = clocks[chosen].due();
        if given[chosen] < weight[chosen] {
            file_due(chosen, due[chosen], &mut due_head, &mut due_entries);
        }
        if (wake as usize) < batch {
            wake_next[chosen] = std::mem::replace(&mut wake_head[wake as usize], chosen as u32);
        }
        // A member still due at this step was left behind (not seen while the prefix
        // bound holds): the buckets can no longer find it, so scan from now on.
        let mut e = due_head[step + 1];
        while e != NONE && !overdue {
            let (member, next) = due_entries[e as usize];
            overdue = due[member as usize] == s1;
            e = next;
        }
        emit(chosen);
    }
}

/// The first step's seam guard: drops `avoid` from the draw when another member is
/// eligible. Returns the credit removed from the total.
fn seam_guard(value: &mut [i64], total: i64, avoid: Option<usize>) -> i64 {
    match avoid {
        Some(a) if value[a] > 0 && total > value[a] => std::mem::take(&mut value[a]),
        _ => 0,
    }
}

/// Not reached while the prefix bound holds. The member furthest behind (the last of
/// equals) has positive credit, since credits sum to B, so counts stay exact.
fn furthest_behind(m: usize, credit: impl Fn(usize) -> i64) -> usize {
    (0..m).max_by_key(|&k| credit(k)).expect("a batch has a member")
}

/// The draw over every member: the first eligible one (in member order, `skip` left out
/// when another is eligible) whose running credit sum exceeds a uniform `x < total`.
fn choose_by_scan(
    m: usize,
    credit: impl Fn(usize) -> i64,
    eligible: impl Fn(usize) -> bool,
    skip: Option<usize>,
    rng: &mut impl Rng,
) -> usize {
    let mut value: Vec<i64> = (0..m).map(|k| if eligible(k) { credit(k) } else { 0 }).collect();
    let total: i64 = value.iter().sum();
    let total = total - seam_guard(&mut value, total, skip);
    if total == 0 {
        return furthest_behind(m, credit);
    }
    let mut x = below(rng, total);
    for (k, &v) in value.iter().enumerate() {
        if x < v {
            return k;
        }
        x -= v;
    }
    unreachable!("x is below the total")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_is_uniform_for_small_and_odd_bounds() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in [1i64, 2, 3, 7, 1000, i64::from(u32::MAX), i64::from(u32::MAX) + 5] {
            for _ in 0..1000 {
                let x = below(&mut rng, n);
                assert!((0..n).contains(&x), "{x} not below {n}");
            }
        }
        // 3 and 10 buckets, 300k draws: every count within 4 standard deviations.
        for n in [3i64, 10] {
            let mut counts = vec![0u64; n as usize];
            for _ in 0..300_000 {
                counts[below(&mut rng, n) as usize] += 1;
            }
            let expected = 300_000 / n as u64;
            for c in counts {
                let tolerance = 4 * (expected as f64).sqrt() as u64;
                assert!(c.abs_diff(expected) < tolerance, "{c} vs {expected} ± {tolerance}");
            }
        }
    }
    use crate::{Apportioner, BatchSize, Weights};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The original step-by-step walk, kept as the specification: at every step it
    /// computes the horizon by walking L = 1, 2, … over every member.
    #[allow(clippy::needless_range_loop)]
    fn reference(counts: &[u64], avoid_first: Option<usize>, rng: &mut impl Rng) -> Vec<usize> {
        let batch: u64 = counts.iter().sum();
        let b = batch as i64;
        let active: Vec<usize> = (0..counts.len()).filter(|&i| counts[i] > 0).collect();
        let m = active.len();
        let weight: Vec<i64> = active.iter().map(|&i| counts[i] as i64).collect();
        let mut credit = vec![0i64; m];
        let mut out = Vec::with_capacity(batch as usize);
        let avoid = avoid_first.and_then(|member| active.iter().position(|&a| a == member));
        for step in 0..batch {
            let mut binding = i64::MAX;
            if credit.iter().zip(&weight).any(|(c, w)| c + w < 0) {
                binding = walk(&credit, &weight, b, b - step as i64);
            }
            for (c, w) in credit.iter_mut().zip(&weight) {
                *c += w;
            }
            let needed_within = |k: usize| binding == i64::MAX || credit[k] + (binding - 1) * weight[k] >= b;
            let mut total: i64 = 0;
            let mut others = false;
            for k in 0..m {
                if credit[k] > 0 && needed_within(k) {
                    total += credit[k];
                    others |= Some(k) != avoid;
                }
            }
            let skip = if step == 0 && others { avoid } else { None };
            if let Some(k) = skip {
                if credit[k] > 0 && needed_within(k) {
                    total -= credit[k];
                }
            }
            let chosen = if total == 0 {
                (0..m).max_by_key(|&k| credit[k]).unwrap()
            } else {
                let mut x = below(rng, total);
                let mut chosen = m;
                for k in 0..m {
                    if credit[k] > 0 && needed_within(k) && Some(k) != skip {
                        if x < credit[k] {
                            chosen = k;
                            break;
                        }
                        x -= credit[k];
                    }
                }
                chosen
            };
            credit[chosen] -= b;
            out.push(active[chosen]);
        }
        out
    }

    /// Smallest L at which the tickets members must receive in the next L steps
    /// (`max(0, ⌊(credit + L·c)/B⌋)` each) fill all L slots, walking while some member
    /// is ahead of its share (the original `binding_by_walk`).
    #[allow(clippy::needless_range_loop)]
    fn walk(credit: &[i64], weight: &[i64], b: i64, remaining: i64) -> i64 {
        let mut quotient: Vec<i64> = credit.iter().map(|c| c.div_euclid(b)).collect();
        let mut remainder: Vec<i64> = credit.iter().map(|c| c.rem_euclid(b)).collect();
        for l in 1..=remaining {
            let mut needed = 0;
            let mut behind = false;
            for k in 0..credit.len() {
                remainder[k] += weight[k];
                if remainder[k] >= b {
                    remainder[k] -= b;
                    quotient[k] += 1;
                }
                needed += quotient[k].max(0);
                behind |= quotient[k] < 0;
            }
            if needed >= l {
                return l;
            }
            if !behind {
                break;
            }
        }
        i64::MAX
    }

    fn few_members() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(0u64..400, 1..9).prop_filter("non-empty batch", |c| c.iter().sum::<u64>() > 0)
    }

    /// Many members, mostly with a handful of tickets (long due gaps, frequent binding).
    fn many_members() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(prop_oneof![3 => 0u64..4, 1 => 0u64..40], 9..70)
            .prop_filter("non-empty batch", |c| c.iter().sum::<u64>() > 0)
    }

    fn avoid_strategy() -> impl Strategy<Value = Option<usize>> {
        prop::option::of(0usize..9)
    }

    const FEW: Tuning = Tuning { few_max: usize::MAX, scan_max: 0, enumerate_max: ENUMERATE_MAX };
    const SCAN: Tuning = Tuning { few_max: 0, scan_max: usize::MAX, enumerate_max: ENUMERATE_MAX };
    const INDEX_BY_BUCKETS: Tuning = Tuning { few_max: 0, scan_max: 0, enumerate_max: i64::MAX };
    const INDEX_BY_SCAN: Tuning = Tuning { few_max: 0, scan_max: 0, enumerate_max: 0 };
    const EVERY_PATH: [Tuning; 5] = [FEW, SCAN, INDEX_BY_BUCKETS, INDEX_BY_SCAN, TUNING];

    /// Each path gives the reference's batch and leaves the generator where it does (the
    /// caller goes on drawing the next batch from it).
    fn same_as_reference(counts: &[u64], avoid: Option<usize>, seed: u64) -> Result<(), TestCaseError> {
        let mut expected_rng = ChaCha8Rng::seed_from_u64(seed);
        let expected = reference(counts, avoid, &mut expected_rng);
        let next_draw = expected_rng.random::<u64>();
        for tuning in EVERY_PATH {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            prop_assert_eq!(&smooth_with(counts, avoid, &mut rng, tuning), &expected, "{:?}", tuning);
            prop_assert_eq!(rng.random::<u64>(), next_draw, "{:?}", tuning);
        }
        Ok(())
    }

    #[test]
    fn every_path_matches_the_reference_on_the_benchmarked_batches() {
        let bench_weights = |members: usize| {
            Weights::from_integers((0..members).map(|i| (format!("m{i}"), 1 + (i as u64 * 7) % 13))).unwrap()
        };
        let batches = [Weights::parse_spec("A=5,B=3,C=2").unwrap(), bench_weights(30), bench_weights(300)]
            .map(|w| Apportioner::new(w).next_counts(BatchSize::DEFAULT));
        for (counts, seeds) in batches.iter().zip([20, 5, 1]) {
            for seed in 0..seeds {
                same_as_reference(counts, Some(0), seed).unwrap();
            }
        }
    }

    #[test]
    fn a_single_member_takes_every_ticket_and_the_same_draws() {
        same_as_reference(&[0, 9], Some(1), 3).unwrap();
    }

    #[test]
    fn the_few_member_path_matches_the_reference_beside_one_and_two_ticket_members() {
        // Tiny members are early for most of the batch, and with counts 1, 1 and B − 2
        // the first tight step lies far ahead (G = 2 for every step past B/2).
        for counts in [[1, 1, 1022], [1, 2, 2045], [0, 1, 1], [3, 1, 396]] {
            for seed in 0..20 {
                same_as_reference(&counts, Some(2), seed).unwrap();
            }
        }
    }

    /// Up to three members, from a handful of tickets to a few thousand each.
    fn up_to_three_members() -> impl Strategy<Value = Vec<u64>> {
        prop::collection::vec(prop_oneof![1 => 0u64..4, 2 => 0u64..100, 2 => 0u64..3000], 1..4)
            .prop_filter("non-empty batch", |c| c.iter().sum::<u64>() > 0)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_path_matches_the_reference_walk_with_up_to_three_members(
            counts in up_to_three_members(), avoid in prop::option::of(0usize..3), seed: u64,
        ) {
            same_as_reference(&counts, avoid, seed)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn every_path_matches_the_reference_walk_with_few_members(
            counts in few_members(), avoid in avoid_strategy(), seed: u64,
        ) {
            same_as_reference(&counts, avoid, seed)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_path_matches_the_reference_walk_with_many_members(
            counts in many_members(), avoid in avoid_strategy(), seed: u64,
        ) {
            same_as_reference(&counts, avoid, seed)?;
        }
    }

    proptest! {
        #[test]
        fn the_slack_of_every_step_is_its_free_slots(
            counts in prop::collection::vec(0u64..40, 1..6).prop_filter("non-empty", |c| c.iter().sum::<u64>() > 0),
            seed: u64,
        ) {
            // slack(T) = (T − s) − (tickets due by T not yet handed out), at every step s.
            let weight: Vec<i64> = counts.iter().filter(|&&c| c > 0).map(|&c| c as i64).collect();
            let b: i64 = weight.iter().sum();
            let mut deadlines = Deadlines::new(&weight);
            let mut given = vec![0i64; weight.len()];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for step in 0..b as usize {
                for t in step + 1..=b as usize {
                    let owed: i64 = weight.iter().zip(&given).map(|(&c, &n)| (t as i64 * c / b - n).max(0)).sum();
                    prop_assert_eq!(i64::from(deadlines.slack[t]), (t - step) as i64 - owed, "step {} T {}", step, t);
                }
                // Hand out to any member with tickets left, however unfair.
                let open: Vec<usize> = (0..weight.len()).filter(|&k| given[k] < weight[k]).collect();
                let k = open[rng.random_range(0..open.len())];
                given[k] += 1;
                deadlines.hand_out(step, (given[k] * b + weight[k] - 1) / weight[k]);
            }
        }

        #[test]
        fn the_due_clock_gives_the_ceiling_of_j_b_over_c(count in 1i64..5000, extra in 0i64..100_000) {
            let b = count + extra;
            let mut clock = DueClock::new(count, b);
            for j in 1..=count.min(300) {
                prop_assert_eq!(clock.due(), (j * b + count - 1) / count);
                prop_assert_eq!(clock.whole_steps(), j * b / count);
                clock.advance();
            }
        }
    }
}
