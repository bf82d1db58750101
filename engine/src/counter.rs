//! Per-day counters read now and then: what one counted between two of its samples.
//!
//! A pool counts each member's draws per pool-local day (`hits:<day>` in Redis). Whoever
//! compares two samples of such a counter (the sampler's one-minute window, the
//! dashboard's hour) must agree on two cases: the counter restarted (Redis lost it, so
//! it went down on the same day), or a midnight fell between the samples (the later one
//! counts a new day). [`day_count_delta`] is that rule, written once.

/// How two samples of a per-day counter lie in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaySpan {
    /// Both samples count the same day (a counter that never changes day, such as a
    /// running total, is always `SameDay`).
    SameDay,
    /// A midnight fell between them: the later sample counts a new day from zero.
    NewDay {
        /// The earlier day's counter as it stands now, when it can still be read: what it
        /// counted after the earlier sample belongs to the span too. `None`: unknown, and
        /// only the new day's count is credited.
        earlier_day_now: Option<u64>,
    },
}

/// What a per-day counter counted between a sample `before` and a later sample `after`.
///
/// On one day it is the difference, unless the counter went down: then it restarted and
/// all of `after` is new. Across a midnight it is the new day's count, plus what the
/// earlier day counted after `before` when that is known (never negative: an earlier day
/// that restarted adds nothing). Saturates instead of overflowing.
pub fn day_count_delta(before: u64, after: u64, span: DaySpan) -> u64 {
    match span {
        DaySpan::SameDay if after >= before => after - before,
        DaySpan::SameDay => after,
        DaySpan::NewDay { earlier_day_now } => {
            earlier_day_now.map_or(0, |earlier| earlier.saturating_sub(before)).saturating_add(after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn on_one_day_the_delta_is_the_difference() {
        assert_eq!(day_count_delta(10, 15, DaySpan::SameDay), 5);
        assert_eq!(day_count_delta(4, 4, DaySpan::SameDay), 0);
    }

    #[test]
    fn a_counter_that_went_down_on_the_same_day_restarted() {
        assert_eq!(day_count_delta(10, 3, DaySpan::SameDay), 3);
    }

    #[test]
    fn across_midnight_the_earlier_days_tail_is_added_to_the_new_days_count() {
        assert_eq!(day_count_delta(10, 3, DaySpan::NewDay { earlier_day_now: Some(12) }), 5);
        assert_eq!(day_count_delta(10, 3, DaySpan::NewDay { earlier_day_now: None }), 3);
        assert_eq!(day_count_delta(10, 3, DaySpan::NewDay { earlier_day_now: Some(0) }), 3, "earlier day lost");
    }

    proptest! {
        #[test]
        fn a_growing_counter_on_one_day_is_credited_exactly_its_growth(before in any::<u64>(), grown in any::<u64>()) {
            let after = before.saturating_add(grown);
            prop_assert_eq!(day_count_delta(before, after, DaySpan::SameDay), after - before);
        }

        #[test]
        fn a_restarted_counter_is_credited_all_it_counted_since(
            (before, after) in (1u64..).prop_flat_map(|before| (Just(before), 0..before)),
        ) {
            prop_assert_eq!(day_count_delta(before, after, DaySpan::SameDay), after);
        }

        #[test]
        fn deltas_over_a_day_of_samples_add_up_to_the_days_count(
            steps in prop::collection::vec(0u64..1_000_000, 1..50),
        ) {
            // A counter that only grows, sampled after each step, starting from zero.
            let mut samples = vec![0u64];
            for step in &steps {
                samples.push(samples.last().unwrap() + step);
            }
            let total: u64 = samples.windows(2).map(|w| day_count_delta(w[0], w[1], DaySpan::SameDay)).sum();
            prop_assert_eq!(total, *samples.last().unwrap());
        }

        #[test]
        fn across_midnight_the_delta_is_the_earlier_days_tail_plus_the_new_days_count(
            before in 0u64..1 << 40,
            tail in 0u64..1 << 40,
            after in 0u64..1 << 40,
        ) {
            let span = DaySpan::NewDay { earlier_day_now: Some(before + tail) };
            prop_assert_eq!(day_count_delta(before, after, span), tail + after);
            prop_assert_eq!(day_count_delta(before, after, DaySpan::NewDay { earlier_day_now: None }), after);
        }

        #[test]
        fn the_delta_never_exceeds_what_the_samples_hold(
            before in any::<u64>(),
            after in any::<u64>(),
            earlier_day_now in prop::option::of(any::<u64>()),
        ) {
            // Nothing is invented: at most the later count, plus the earlier day's count.
            let same = day_count_delta(before, after, DaySpan::SameDay);
            prop_assert!(same <= after);
            let new_day = day_count_delta(before, after, DaySpan::NewDay { earlier_day_now });
            prop_assert!(new_day >= after);
            prop_assert!(new_day <= after.saturating_add(earlier_day_now.unwrap_or(0)));
        }
    }
}
