//! Local pickers, for when there is no shared pool: smooth weighted round robin (nginx),
//! alias-method weighted random, and a binary-search baseline to benchmark them against.

use std::sync::Arc;

use rand::Rng;

use crate::Weights;

/// Nginx's smooth weighted round robin: deterministic, evenly spread, per process.
///
/// The weights live in an immutable `Arc<Weights>` snapshot; [`Swrr::reweight`] swaps in a
/// new snapshot in one assignment (readers holding the old `Arc` are unaffected) and keeps
/// the running `current` value of every member that remains, so a reweight does not
/// restart the sequence.
#[derive(Debug, Clone)]
pub struct Swrr {
    snapshot: Arc<Weights>,
    current: Vec<i128>,
}

impl Swrr {
    /// Starts with every `current` at zero.
    pub fn new(weights: Arc<Weights>) -> Self {
        let current = vec![0; weights.len()];
        Self { snapshot: weights, current }
    }

    /// The weights in use.
    pub fn weights(&self) -> &Arc<Weights> {
        &self.snapshot
    }

    /// Next member index: every positive member gains its weight, the largest `current`
    /// wins (first in member order on ties) and pays back the total. Zero-weight members
    /// are never picked.
    pub fn pick(&mut self) -> usize {
        let mut best = usize::MAX;
        let mut best_value = i128::MIN;
        for (i, (current, &w)) in self.current.iter_mut().zip(self.snapshot.weights()).enumerate() {
            if w == 0 {
                continue;
            }
            *current += i128::from(w);
            if *current > best_value {
                best_value = *current;
                best = i;
            }
        }
        self.current[best] -= i128::from(self.snapshot.total());
        best
    }

    /// Swaps in new weights. Members present in both keep their `current` (clamped to
    /// `±` the new total so a shrunken pool does not inherit a long burst); new members and
    /// zero-weight members start at 0.
    pub fn reweight(&mut self, weights: Arc<Weights>) {
        let limit = i128::from(weights.total());
        let current = weights
            .iter()
            .map(|(name, w)| match (w, self.snapshot.index_of(name)) {
                (0, _) | (_, None) => 0,
                (_, Some(old)) => self.current[old].clamp(-limit, limit),
            })
            .collect();
        self.snapshot = weights;
        self.current = current;
    }
}

/// Weighted random choice in O(1) per pick (Vose's alias method), with exact integer
/// probabilities: member `i` is picked with probability exactly `w_i / W`.
#[derive(Debug, Clone)]
pub struct AliasTable {
    /// Per column: keep the column's own member when a draw in `0..total` is below this.
    keep: Vec<u64>,
    alias: Vec<u32>,
    total: u64,
}

impl AliasTable {
    /// Builds the table in O(n).
    pub fn new(weights: &Weights) -> Self {
        let n = weights.len();
        let capacity = u128::from(weights.total());
        // Each member's mass is w_i·n; each column holds exactly `capacity`.
        let mut mass: Vec<u128> = weights.weights().iter().map(|&w| u128::from(w) * n as u128).collect();
        let mut keep = vec![0u64; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| mass[i] < capacity);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            keep[s] = mass[s] as u64;
            alias[s] = l as u32;
            mass[l] -= capacity - mass[s];
            if mass[l] < capacity {
                large.pop();
                small.push(l);
            }
        }
        // Exact arithmetic leaves only full columns here.
        for i in large.into_iter().chain(small) {
            keep[i] = capacity as u64;
        }
        Self { keep, alias, total: weights.total() }
    }

    /// A member index, `w_i / W` likely.
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        let column = rng.random_range(0..self.keep.len());
        if rng.random_range(0..self.total) < self.keep[column] {
            column
        } else {
            self.alias[column] as usize
        }
    }
}

/// The O(log n) baseline: binary search over cumulative weights.
#[derive(Debug, Clone)]
pub struct CumulativePicker {
    cumulative: Vec<u64>,
}

impl CumulativePicker {
    /// Builds the prefix sums.
    pub fn new(weights: &Weights) -> Self {
        let cumulative = weights
            .weights()
            .iter()
            .scan(0u64, |sum, &w| {
                *sum += w;
                Some(*sum)
            })
            .collect();
        Self { cumulative }
    }

    /// A member index, `w_i / W` likely.
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        let total = *self.cumulative.last().expect("weights are never empty");
        let x = rng.random_range(0..total);
        self.cumulative.partition_point(|&c| c <= x)
    }
}

/// Plain weighted round robin: each member's whole weight in a row (`AAAAABBBCC`), on a
/// loop. Only a reference point for `verify`; it shows the bursts smooth orderings avoid.
#[derive(Debug, Clone)]
pub struct PlainRoundRobin {
    weights: Vec<u64>,
    member: usize,
    used: u64,
}

impl PlainRoundRobin {
    /// Uses the weights divided by their gcd (`50:30:20` runs like `5:3:2`).
    pub fn new(weights: &Weights) -> Self {
        Self { weights: weights.reduced().weights().to_vec(), member: 0, used: 0 }
    }

    /// Next member index.
    pub fn pick(&mut self) -> usize {
        while self.used >= self.weights[self.member] {
            self.member = (self.member + 1) % self.weights.len();
            self.used = 0;
        }
        self.used += 1;
        self.member
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn spec(s: &str) -> Weights {
        Weights::parse_spec(s).unwrap()
    }

    #[test]
    fn swrr_gives_the_nginx_sequence_for_five_one_one() {
        let mut s = Swrr::new(Arc::new(spec("a=5,b=1,c=1")));
        let seq: String = (0..7).map(|_| ["a", "b", "c"][s.pick()]).collect();
        assert_eq!(seq, "aabacaa");
    }

    #[test]
    fn swrr_keeps_current_values_of_remaining_members_on_reweight() {
        let mut s = Swrr::new(Arc::new(spec("A=5,B=3,C=2")));
        s.pick();
        s.pick();
        let before = s.current.clone();
        s.reweight(Arc::new(spec("C=2,A=5,D=4")));
        assert_eq!(s.current, vec![before[2], before[0], 0]);
    }

    #[test]
    fn plain_round_robin_runs_each_weight_in_a_row() {
        let mut p = PlainRoundRobin::new(&spec("A=50,B=30,C=20"));
        let seq: Vec<usize> = (0..12).map(|_| p.pick()).collect();
        assert_eq!(seq, vec![0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 0, 0]);
    }

    #[test]
    fn the_alias_table_holds_exactly_each_members_probability() {
        // Probability of i = Σ over columns of P(column)·P(i | column); with integer
        // tables this is exact: Σ_j [j == i]·keep_j + [alias_j == i]·(total − keep_j) = n·w_i.
        let w = spec("A=7,B=0,C=1,D=13,E=2");
        let t = AliasTable::new(&w);
        for i in 0..w.len() {
            let mass: u128 = (0..w.len())
                .map(|j| {
                    let own = if j == i { u128::from(t.keep[j]) } else { 0 };
                    let via = if t.alias[j] as usize == i { u128::from(t.total - t.keep[j]) } else { 0 };
                    own + via
                })
                .sum();
            assert_eq!(mass, u128::from(w.weight(i)) * w.len() as u128, "member {i}");
        }
    }

    fn weights_strategy() -> impl Strategy<Value = Weights> {
        prop::collection::vec(0u64..1000, 1..12)
            .prop_filter("some weight positive", |w| w.iter().any(|&x| x > 0))
            .prop_map(|w| Weights::from_integers(w.into_iter().enumerate().map(|(i, x)| (format!("m{i}"), x))).unwrap())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        #[test]
        fn a_zero_weight_member_is_never_picked_by_any_selector(weights in weights_strategy(), seed: u64) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut swrr = Swrr::new(Arc::new(weights.clone()));
            let alias = AliasTable::new(&weights);
            let cumulative = CumulativePicker::new(&weights);
            let mut plain = PlainRoundRobin::new(&weights);
            for _ in 0..500 {
                for i in [swrr.pick(), alias.pick(&mut rng), cumulative.pick(&mut rng), plain.pick()] {
                    prop_assert!(weights.weight(i) > 0);
                }
            }
        }

        #[test]
        fn swrr_is_exact_over_every_full_cycle(weights in weights_strategy()) {
            let w = weights.reduced();
            let mut s = Swrr::new(Arc::new(w.clone()));
            let mut counts = vec![0u64; w.len()];
            for _ in 0..w.total() {
                counts[s.pick()] += 1;
            }
            prop_assert_eq!(counts.as_slice(), w.weights());
        }

        #[test]
        fn the_alias_table_is_exact_for_any_weights(weights in weights_strategy()) {
            let t = AliasTable::new(&weights);
            let n = weights.len();
            let mut mass = vec![0u128; n];
            for j in 0..n {
                mass[j] += u128::from(t.keep[j]);
                mass[t.alias[j] as usize] += u128::from(t.total - t.keep[j]);
            }
            for (i, m) in mass.iter().enumerate() {
                prop_assert_eq!(*m, u128::from(weights.weight(i)) * n as u128);
            }
        }
    }
}
