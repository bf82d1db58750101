//! The longest run of one member among recent draws, as draws stream past: what the live
//! `tessera_pool_longest_run` gauge reports, so the "no long runs" promise is watched in
//! production and not only by `tessera verify`.
//!
//! A run is recent while its last draw is within the window (a run that ended inside the
//! window counts whole, even if it began before). Runs that can never again be the
//! longest (an older run no longer than a newer one) are forgotten at once, so memory
//! stays small however many draws pass: a sliding-window maximum.

use std::collections::VecDeque;

/// One run of draws of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub member: String,
    pub length: u64,
    /// When its last draw was made (ms since the epoch).
    pub last_ms: i64,
}

/// The runs of a stream of draws, with the longest recent one at hand.
#[derive(Debug, Clone)]
pub struct RecentRuns {
    window_ms: i64,
    /// Finished runs that may still be the longest: lengths strictly decreasing from the
    /// front, last draws increasing.
    done: VecDeque<Run>,
    current: Option<Run>,
}

impl RecentRuns {
    /// Runs are recent for `window_ms` after their last draw.
    pub fn new(window_ms: i64) -> Self {
        Self { window_ms, done: VecDeque::new(), current: None }
    }

    /// One draw of `member` at `at_ms` (draws come in order; a time earlier than the one
    /// before is taken as that time).
    pub fn push(&mut self, member: &str, at_ms: i64) {
        if let Some(run) = self.current.as_mut().filter(|run| run.member == member) {
            run.length += 1;
            run.last_ms = run.last_ms.max(at_ms);
            return;
        }
        let at_ms = self.current.as_ref().map_or(at_ms, |run| run.last_ms.max(at_ms));
        if let Some(finished) = self.current.take() {
            while self.done.back().is_some_and(|older| older.length <= finished.length) {
                self.done.pop_back();
            }
            self.done.push_back(finished);
        }
        self.current = Some(Run { member: member.to_owned(), length: 1, last_ms: at_ms });
    }

    /// The longest run whose last draw is at or after `now_ms − window`, if any (of runs as
    /// long, one of them).
    pub fn longest(&mut self, now_ms: i64) -> Option<&Run> {
        let since = now_ms - self.window_ms;
        while self.done.front().is_some_and(|run| run.last_ms < since) {
            self.done.pop_front();
        }
        let current = self.current.as_ref().filter(|run| run.last_ms >= since);
        match (self.done.front(), current) {
            (Some(done), Some(current)) if current.length > done.length => Some(current),
            (Some(done), _) => Some(done),
            (None, current) => current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_long_run_is_reported_until_a_window_after_its_last_draw() {
        let mut runs = RecentRuns::new(60_000);
        for (i, member) in ["A", "A", "A", "B", "A", "B"].iter().enumerate() {
            runs.push(member, i as i64 * 1000);
        }
        let longest = runs.longest(5_000).unwrap();
        assert_eq!((longest.member.as_str(), longest.length, longest.last_ms), ("A", 3, 2000));
        assert_eq!(runs.longest(62_000).unwrap().length, 3, "its last draw at 2 s is in the window");
        assert_eq!(runs.longest(62_001).unwrap().length, 1, "gone");
        assert!(runs.longest(65_001).is_none(), "nothing drawn in the last minute");
    }

    proptest! {
        #[test]
        fn the_longest_recent_run_is_what_counting_every_run_finds(
            draws in prop::collection::vec((0usize..3, 0i64..5_000), 1..300),
            window in 1i64..20_000,
            probes in prop::collection::vec(0i64..100_000, 1..5),
        ) {
            let names = ["A", "B", "C"];
            let mut at = 0;
            let mut timed = Vec::new();
            let mut runs = RecentRuns::new(window);
            for (member, gap) in draws {
                at += gap;
                timed.push((member, at));
                runs.push(names[member], at);
            }
            let mut probes = probes;
            probes.sort_unstable();
            for probe in probes {
                let now = at + probe - 50_000;
                // Every run, by counting: (length, last draw).
                let mut all: Vec<(u64, i64)> = Vec::new();
                for (i, &(member, t)) in timed.iter().enumerate() {
                    if i > 0 && timed[i - 1].0 == member {
                        let last = all.last_mut().unwrap();
                        last.0 += 1;
                        last.1 = t;
                    } else {
                        all.push((1, t));
                    }
                }
                let expected = all.iter().filter(|(_, last)| *last >= now - window).map(|(len, _)| *len).max();
                prop_assert_eq!(runs.longest(now).map(|r| r.length), expected, "now {}", now);
            }
        }
    }
}
