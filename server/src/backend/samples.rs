//! The dashboard's pool samples of the last hour, kept between renders. Samples are never
//! changed once written, so a render reads again only the samples since shortly before
//! the newest it holds (a minute back, for a sample committed late), not the hour's
//! thousands of samples and their members each time.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

use crate::samples::store::SamplePage;
use crate::state::AppState;

/// How far before the newest sample held a render reads again.
const REREAD: TimeDelta = TimeDelta::seconds(60);

/// Every pool's samples held, oldest first, with whether older ones were left out.
#[derive(Default)]
pub struct SampleCache {
    held: tokio::sync::Mutex<BTreeMap<String, SamplePage>>,
}

/// Every pool's samples taken since `since`, the newest `limit` of each, as
/// `list_samples_of_every_pool` reads them; held locked (not copied) while the caller
/// reads them, so that a dashboard arriving meanwhile waits and then reads only what is new.
pub(super) async fn recent(
    state: &AppState,
    since: DateTime<Utc>,
    limit: u32,
) -> Result<tokio::sync::MutexGuard<'_, BTreeMap<String, SamplePage>>, sqlx::Error> {
    let mut held = state.ui_cache.samples.held.lock().await;
    let newest = held.values().filter_map(|p| p.samples.last()).map(|s| s.taken_at).max();
    let from = newest.map_or(since, |n| (n - REREAD).max(since));
    let fresh = crate::samples::store::list_samples_of_every_pool(&state.db, from, limit).await?;
    merge(&mut held, fresh, from, since, limit as usize);
    Ok(held)
}

/// `held` with `fresh` (every sample since `from`) in place of what it held since `from`,
/// then only the samples since `since`, the newest `limit` of each pool.
fn merge(
    held: &mut BTreeMap<String, SamplePage>,
    fresh: BTreeMap<String, SamplePage>,
    from: DateTime<Utc>,
    since: DateTime<Utc>,
    limit: usize,
) {
    for page in held.values_mut() {
        page.samples.retain(|s| s.taken_at < from);
    }
    for (pool, page) in fresh {
        let kept = held.entry(pool).or_insert_with(|| SamplePage { samples: Vec::new(), truncated: false });
        kept.samples.extend(page.samples);
        kept.truncated |= page.truncated;
    }
    held.retain(|_, page| {
        page.samples.retain(|s| s.taken_at >= since);
        if page.samples.len() > limit {
            let over = page.samples.len() - limit;
            page.samples.drain(..over);
            page.truncated = true;
        }
        !page.samples.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::pool_sampler::PoolSample;

    fn sample(at: i64) -> PoolSample {
        PoolSample {
            taken_at: DateTime::from_timestamp(at, 0).unwrap(),
            version: 1,
            day: chrono::NaiveDate::from_ymd_opt(2026, 12, 2).unwrap(),
            tickets: at as u64,
            standby: 0,
            length: at as u64,
            batches: None,
            tiers: None,
            window_seconds: None,
            draws: None,
            members: Default::default(),
        }
    }

    fn page(at: &[i64]) -> SamplePage {
        SamplePage { samples: at.iter().copied().map(sample).collect(), truncated: false }
    }

    fn times(held: &BTreeMap<String, SamplePage>, pool: &str) -> Vec<i64> {
        held[pool].samples.iter().map(|s| s.taken_at.timestamp()).collect()
    }

    #[test]
    fn what_was_read_again_replaces_what_was_held_since_then_and_the_hour_is_trimmed() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let mut held = BTreeMap::from([("a".to_owned(), page(&[100, 110, 120, 130])), ("b".to_owned(), page(&[115]))]);
        // Read again from 120: a sample committed late at 125 appears, 120 and 130 are read
        // again (not doubled), 140 is new; `b` has nothing since 120 and keeps what it held;
        // `c` is new.
        let fresh = BTreeMap::from([("a".to_owned(), page(&[120, 125, 130, 140])), ("c".to_owned(), page(&[135]))]);
        merge(&mut held, fresh, at(120), at(105), 4);
        assert_eq!(times(&held, "a"), [120, 125, 130, 140], "100 is older than the hour, 110 past the limit");
        assert!(held["a"].truncated && !held["b"].truncated);
        assert_eq!((times(&held, "b"), times(&held, "c")), (vec![115], vec![135]));

        // An hour later than all of `b`'s samples, `b` is gone.
        merge(&mut held, BTreeMap::new(), at(140), at(120), 4);
        assert!(!held.contains_key("b"));
        assert_eq!(times(&held, "a"), [120, 125, 130], "140 was since `from` and not read again: gone");
    }
}
