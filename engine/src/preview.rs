//! What a set of weights will do to a pool, before it is applied: each member's expected
//! share, its tickets per batch, and how evenly the pool's ordering spreads them. The
//! weights editor runs this in the browser (wasm) on every keystroke, old and new side by
//! side, so it is bounded: the ordering is measured over at most [`MAX_PREVIEW_TICKETS`].

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::order::{build_batch, TailRun};
use crate::{Apportioner, BatchSize, Ordering, Weights};

/// The window the deviation is measured over: the same as `tessera verify`'s default.
pub const PREVIEW_WINDOW: usize = 100;

/// Batches built for a preview (fewer when the batch is large): enough to cross seams.
pub const PREVIEW_BATCHES: usize = 4;

/// The most tickets a preview orders. A pool with a larger batch gets its counts and
/// shares, and no ordering figures.
pub const MAX_PREVIEW_TICKETS: usize = 16_384;

/// Tickets of the ordering a preview shows as a strip (one cell per ticket): enough to see
/// clumps, few enough to draw on every keystroke.
pub const STRIP_TICKETS: usize = 300;

/// The seed of every preview: the same weights always preview the same, on the server
/// (first render) and in the browser.
pub const PREVIEW_SEED: u64 = 1;

/// One member in a preview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberPreview {
    pub member: String,
    pub weight: u64,
    /// `weight / total`.
    pub share: f64,
    /// Fewest and most tickets the member gets in one batch (carried apportionment makes
    /// them differ by at most one).
    pub batch_min: u64,
    pub batch_max: u64,
}

/// How the ordering spreads the tickets, measured over consecutive batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderingPreview {
    /// Tickets measured (`batches × batch size`).
    pub tickets: usize,
    /// Window size.
    pub window: usize,
    /// The largest `|tickets of a member in any window − window × share|`.
    pub max_window_dev: f64,
    /// The longest run of one member's tickets in a row, and whose.
    pub longest_run: usize,
    pub longest_run_member: String,
    /// The first [`STRIP_TICKETS`] tickets of the ordering, as member indices (the order of
    /// [`Preview::members`]).
    pub head: Vec<u32>,
}

/// The whole preview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    pub batch_size: u32,
    pub ordering: Ordering,
    pub members: Vec<MemberPreview>,
    /// `None` when the batch is larger than [`MAX_PREVIEW_TICKETS`].
    pub spread: Option<OrderingPreview>,
}

/// Previews `weights` in a pool with this batch size and ordering: a fresh apportionment
/// (as after a rebuild), [`PREVIEW_BATCHES`] batches built as the refill job builds them.
pub fn preview(weights: &Weights, batch: BatchSize, ordering: Ordering) -> Preview {
    let n = weights.len();
    let batches = (MAX_PREVIEW_TICKETS / batch.len().max(1)).clamp(1, PREVIEW_BATCHES);
    let mut apportioner = Apportioner::new(weights.clone());
    let mut rng = ChaCha8Rng::seed_from_u64(PREVIEW_SEED);
    let mut min = vec![u64::MAX; n];
    let mut max = vec![0u64; n];
    let measure = batch.len() <= MAX_PREVIEW_TICKETS;
    let mut sequence = Vec::with_capacity(if measure { batches * batch.len() } else { 0 });
    for _ in 0..batches {
        let counts = apportioner.next_counts(batch);
        for (i, &c) in counts.iter().enumerate() {
            min[i] = min[i].min(c);
            max[i] = max[i].max(c);
        }
        if measure {
            let tail = TailRun::of(&sequence);
            sequence.extend(build_batch(ordering, &counts, tail, &mut rng));
        }
    }
    let shares = weights.shares();
    let spread = measure.then(|| {
        let window = PREVIEW_WINDOW.min(sequence.len());
        let m = Metrics::compute(&sequence, &shares, window);
        let (who, run) = m
            .max_run
            .iter()
            .enumerate()
            .max_by_key(|&(i, r)| (*r, std::cmp::Reverse(i)))
            .map(|(i, r)| (i, *r))
            .unwrap_or((0, 0));
        OrderingPreview {
            tickets: sequence.len(),
            window,
            max_window_dev: m.max_window_dev,
            longest_run: run,
            longest_run_member: weights.name(who).to_owned(),
            head: sequence.iter().take(STRIP_TICKETS).map(|&i| i as u32).collect(),
        }
    });
    let members = (0..n)
        .map(|i| MemberPreview {
            member: weights.name(i).to_owned(),
            weight: weights.weight(i),
            share: shares[i],
            batch_min: min[i],
            batch_max: max[i],
        })
        .collect();
    Preview { batch_size: batch.get(), ordering, members, spread }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(spec: &str) -> Weights {
        Weights::parse_spec(spec).unwrap()
    }

    #[test]
    fn counts_add_up_to_the_batch_and_shares_to_one() {
        let p = preview(&weights("A=45,B=30,C=25"), BatchSize::new(60, 1 << 20).unwrap(), Ordering::Smooth);
        assert_eq!(p.members.iter().map(|m| m.batch_min).collect::<Vec<_>>(), vec![27, 18, 15]);
        assert_eq!(p.members.iter().map(|m| m.batch_max).collect::<Vec<_>>(), vec![27, 18, 15]);
        assert!((p.members.iter().map(|m| m.share).sum::<f64>() - 1.0).abs() < 1e-12);
        let spread = p.spread.unwrap();
        assert_eq!(spread.tickets, 240);
        assert_eq!(spread.window, PREVIEW_WINDOW);
    }

    #[test]
    fn the_same_weights_always_preview_the_same() {
        let w = weights("A=5,B=3,C=2");
        let b = BatchSize::new(1024, 1 << 20).unwrap();
        assert_eq!(preview(&w, b, Ordering::Shuffle), preview(&w, b, Ordering::Shuffle));
        assert_eq!(preview(&w, b, Ordering::Smooth), preview(&w, b, Ordering::Smooth));
    }

    #[test]
    fn smooth_spreads_evenly_where_shuffle_clumps() {
        let w = weights("A=5,B=3,C=2");
        let b = BatchSize::new(1024, 1 << 20).unwrap();
        let smooth = preview(&w, b, Ordering::Smooth).spread.unwrap();
        let shuffle = preview(&w, b, Ordering::Shuffle).spread.unwrap();
        // The engine's window bound for smooth (property-tested in `order`), and the runs.
        assert!(smooth.max_window_dev <= 2.0 + 1e-9, "{smooth:?}");
        assert!(smooth.longest_run <= 3, "{smooth:?}");
        assert!(shuffle.max_window_dev > smooth.max_window_dev, "{shuffle:?} vs {smooth:?}");
        assert!(shuffle.longest_run > smooth.longest_run, "{shuffle:?} vs {smooth:?}");
    }

    #[test]
    fn a_fractional_share_varies_by_one_ticket_between_batches() {
        let p = preview(&weights("A=1,B=2"), BatchSize::new(10, 1 << 20).unwrap(), Ordering::Smooth);
        let a = &p.members[0];
        assert_eq!((a.batch_min, a.batch_max), (3, 4));
    }

    #[test]
    fn a_huge_batch_gets_counts_but_no_ordering_figures() {
        let p = preview(&weights("A=1,B=1"), BatchSize::new(1 << 20, 1 << 24).unwrap(), Ordering::Smooth);
        assert!(p.spread.is_none());
        assert_eq!(p.members[0].batch_min, 1 << 19);
    }

    #[test]
    fn the_strip_is_the_head_of_the_measured_ordering() {
        let p = preview(&weights("A=45,B=30,C=25"), BatchSize::new(100, 1 << 20).unwrap(), Ordering::Smooth);
        let spread = p.spread.unwrap();
        assert_eq!(spread.head.len(), STRIP_TICKETS);
        let count = |m: u32| spread.head.iter().filter(|&&i| i == m).count();
        // Three whole batches of 100: exactly the apportioned counts.
        assert_eq!((count(0), count(1), count(2)), (135, 90, 75));
        let q = preview(&weights("A=90,B=5,C=5"), BatchSize::new(100, 1 << 20).unwrap(), Ordering::Smooth);
        assert_ne!(q.spread.unwrap().head, spread.head, "other weights, another strip");
    }

    #[test]
    fn a_member_with_weight_zero_gets_no_tickets() {
        let p = preview(&weights("A=1,B=0"), BatchSize::new(64, 1 << 20).unwrap(), Ordering::Smooth);
        assert_eq!((p.members[1].batch_min, p.members[1].batch_max), (0, 0));
        assert_eq!(p.spread.unwrap().longest_run_member, "A");
    }
}
