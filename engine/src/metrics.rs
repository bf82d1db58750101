//! Distribution metrics of any ticket sequence: share error, runs, switches, windows.

use serde::{Deserialize, Serialize};

/// How evenly a sequence of member indices follows the intended shares.
///
/// Every figure is in tickets. Windows are all `len − W + 1` runs of `W` consecutive
/// tickets; when the sequence is shorter than `W` (or `W` is 0) there are none and the
/// window figures are 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Length of the sequence.
    pub draws: usize,
    /// Window size `W`.
    pub window: usize,
    /// Tickets per member.
    pub counts: Vec<u64>,
    /// Long-run error per member: `count − draws·share` (positive: over-served).
    pub long_run_error: Vec<f64>,
    /// Longest run of consecutive tickets per member.
    pub max_run: Vec<usize>,
    /// How many times consecutive tickets differ.
    pub switches: usize,
    /// Fewest tickets a member holds in any window.
    pub window_min: Vec<u64>,
    /// Most tickets a member holds in any window.
    pub window_max: Vec<u64>,
    /// Per member, the largest `|count in window − W·share|`.
    pub window_dev: Vec<f64>,
    /// The largest `window_dev` over all members.
    pub max_window_dev: f64,
}

impl Metrics {
    /// Measures `sequence` (member indices, each `< shares.len()`) against `shares`.
    pub fn compute(sequence: &[usize], shares: &[f64], window: usize) -> Metrics {
        let members = shares.len();
        let mut counts = vec![0u64; members];
        let mut max_run = vec![0usize; members];
        let mut switches = 0;
        let mut run = 0;
        for (i, &m) in sequence.iter().enumerate() {
            counts[m] += 1;
            if i > 0 && sequence[i - 1] == m {
                run += 1;
            } else {
                if i > 0 {
                    switches += 1;
                }
                run = 1;
            }
            max_run[m] = max_run[m].max(run);
        }
        let draws = sequence.len();
        let long_run_error = (0..members).map(|m| counts[m] as f64 - draws as f64 * shares[m]).collect();

        let mut window_min = vec![0u64; members];
        let mut window_max = vec![0u64; members];
        if window > 0 && window <= draws {
            let mut in_window = vec![0u64; members];
            for &m in &sequence[..window] {
                in_window[m] += 1;
            }
            window_min.clone_from(&in_window);
            window_max.clone_from(&in_window);
            for end in window..draws {
                in_window[sequence[end]] += 1;
                in_window[sequence[end - window]] -= 1;
                // Only the two members that changed can set a new extreme.
                for m in [sequence[end], sequence[end - window]] {
                    window_min[m] = window_min[m].min(in_window[m]);
                    window_max[m] = window_max[m].max(in_window[m]);
                }
            }
        }
        let window_dev: Vec<f64> = if window > 0 && window <= draws {
            (0..members)
                .map(|m| {
                    let ideal = window as f64 * shares[m];
                    (window_max[m] as f64 - ideal).max(ideal - window_min[m] as f64)
                })
                .collect()
        } else {
            vec![0.0; members]
        };
        let max_window_dev = window_dev.iter().copied().fold(0.0, f64::max);
        Metrics {
            draws,
            window,
            counts,
            long_run_error,
            max_run,
            switches,
            window_min,
            window_max,
            window_dev,
            max_window_dev,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_round_robin_has_the_expected_runs_switches_and_windows() {
        // AAAAABBBCC twice.
        let seq: Vec<usize> = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2].repeat(2);
        let m = Metrics::compute(&seq, &[0.5, 0.3, 0.2], 5);
        assert_eq!(m.counts, vec![10, 6, 4]);
        assert_eq!(m.max_run, vec![5, 3, 2]);
        assert_eq!(m.switches, 5);
        assert_eq!(m.window_min, vec![0, 0, 0]);
        assert_eq!(m.window_max, vec![5, 3, 2]);
        assert_eq!(m.max_window_dev, 2.5);
        assert!(m.long_run_error.iter().all(|e| e.abs() < 1e-9));
    }

    #[test]
    fn a_window_longer_than_the_sequence_reports_no_window_figures() {
        let m = Metrics::compute(&[0, 1], &[0.5, 0.5], 3);
        assert_eq!(m.max_window_dev, 0.0);
        assert_eq!(m.window_max, vec![0, 0]);
    }

    proptest! {
        #[test]
        fn sliding_windows_agree_with_counting_every_window(
            seq in prop::collection::vec(0usize..3, 1..200),
            window in 1usize..30,
        ) {
            let m = Metrics::compute(&seq, &[0.5, 0.3, 0.2], window);
            prop_assume!(window <= seq.len());
            for member in 0..3 {
                let per_window: Vec<u64> = seq.windows(window)
                    .map(|w| w.iter().filter(|&&x| x == member).count() as u64).collect();
                prop_assert_eq!(m.window_min[member], *per_window.iter().min().unwrap());
                prop_assert_eq!(m.window_max[member], *per_window.iter().max().unwrap());
            }
            prop_assert_eq!(m.counts.iter().sum::<u64>() as usize, seq.len());
            prop_assert_eq!(m.switches, seq.windows(2).filter(|p| p[0] != p[1]).count());
        }
    }
}
