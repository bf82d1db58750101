//! The dashboard's pool samples of the last hour, kept between renders. Samples are never
//! changed once written, so a render reads again only the samples since shortly before
//! the newest it holds (a minute back, for a sample committed late), not the hour's
//! thousands of samples and their members each time.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

use crate::samples::store::SamplePage;

/// How far before the newest sample held a render reads again.
const REREAD: TimeDelta = TimeDelta::seconds(60);

/// How often a render reads the whole hour again all the same (a sampler whose clock
/// jumped back wrote samples older than the newest held, which a re-read from there misses).
const FULL_READ_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Every pool's samples held, oldest first, with whether older ones were left out.
#[derive(Default)]
pub struct SampleCache {
    held: tokio::sync::Mutex<Held>,
}

/// What the cache holds.
#[derive(Default)]
pub(super) struct Held {
    /// By pool, oldest first; `truncated` as of the last merge.
    pub(super) pages: BTreeMap<String, SamplePage>,
    /// By pool, the newest time of a sample left out for the limit.
    cut: BTreeMap<String, DateTime<Utc>>,
    /// When the whole hour was last read.
    full_read_at: Option<std::time::Instant>,
}

/// Every pool's samples taken since `since`, the newest `limit` of each, as
/// `list_samples_of_every_pool` reads them; held locked (not copied) while the caller
/// reads them, so that a dashboard arriving meanwhile waits and then reads only what is new.
pub(super) async fn recent(
    state: &super::UiBackend,
    now: DateTime<Utc>,
    since: DateTime<Utc>,
    limit: u32,
) -> Result<tokio::sync::MutexGuard<'_, Held>, sqlx::Error> {
    let mut held = state.cache.samples.held.lock().await;
    let due = held.full_read_at.is_none_or(|at| at.elapsed() >= FULL_READ_EVERY);
    // A sample dated ahead of this clock does not hide the ones after it.
    let newest = held.pages.values().filter_map(|p| p.samples.last()).map(|s| s.taken_at.min(now)).max();
    let from = match newest {
        Some(newest) if !due => (newest - REREAD).max(since),
        _ => since,
    };
    let fresh = crate::samples::store::list_samples_of_every_pool(&state.db, from, limit).await?;
    if from == since {
        *held = Held { full_read_at: Some(std::time::Instant::now()), ..Held::default() };
    }
    merge(&mut held, fresh, from, since, limit as usize);
    Ok(held)
}

/// `held` with `fresh` (every sample since `from`, the newest `limit` of each pool) in
/// place of what it held since `from`, then only the samples since `since`, the newest
/// `limit` of each pool; a pool is `truncated` while a sample left out for the limit is
/// since `since`.
fn merge(
    held: &mut Held,
    fresh: BTreeMap<String, SamplePage>,
    from: DateTime<Utc>,
    since: DateTime<Utc>,
    limit: usize,
) {
    for page in held.pages.values_mut() {
        page.samples.retain(|s| s.taken_at < from);
    }
    for (pool, page) in fresh {
        if page.truncated {
            // The store left out samples between `from` and its oldest: everything held
            // before them is past the limit too.
            held.pages.remove(&pool);
            let oldest = page.samples.first().map_or(from, |s| s.taken_at);
            let cut = held.cut.entry(pool.clone()).or_insert(oldest);
            *cut = (*cut).max(oldest);
        }
        let kept = held.pages.entry(pool).or_insert_with(|| SamplePage { samples: Vec::new(), truncated: false });
        kept.samples.extend(page.samples);
    }
    let Held { pages, cut, .. } = held;
    pages.retain(|pool, page| {
        page.samples.retain(|s| s.taken_at >= since);
        if page.samples.len() > limit {
            let over = page.samples.len() - limit;
            let newest_out = page.samples[over - 1].taken_at;
            page.samples.drain(..over);
            let c = cut.entry(pool.clone()).or_insert(newest_out);
            *c = (*c).max(newest_out);
        }
        page.truncated = cut.get(pool).is_some_and(|c| *c >= since);
        !page.samples.is_empty()
    });
    cut.retain(|_, c| *c >= since);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::sampler::PoolSample;

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

    fn times(held: &Held, pool: &str) -> Vec<i64> {
        held.pages[pool].samples.iter().map(|s| s.taken_at.timestamp()).collect()
    }

    #[test]
    fn what_was_read_again_replaces_what_was_held_since_then_and_the_hour_is_trimmed() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let pages = BTreeMap::from([("a".to_owned(), page(&[100, 110, 120, 130])), ("b".to_owned(), page(&[115]))]);
        let mut held = Held { pages, ..Held::default() };
        // Read again from 120: a sample committed late at 125 appears, 120 and 130 are read
        // again (not doubled), 140 is new; `b` has nothing since 120 and keeps what it held;
        // `c` is new.
        let fresh = BTreeMap::from([("a".to_owned(), page(&[120, 125, 130, 140])), ("c".to_owned(), page(&[135]))]);
        merge(&mut held, fresh, at(120), at(105), 4);
        assert_eq!(times(&held, "a"), [120, 125, 130, 140], "100 is older than the hour, 110 past the limit");
        assert!(held.pages["a"].truncated && !held.pages["b"].truncated);
        assert_eq!((times(&held, "b"), times(&held, "c")), (vec![115], vec![135]));

        // An hour later than all of `b`'s samples, `b` is gone; the sample left out for
        // the limit (110) is older than the hour now: `a` is whole again.
        merge(&mut held, BTreeMap::new(), at(140), at(120), 4);
        assert!(!held.pages.contains_key("b"));
        assert_eq!(times(&held, "a"), [120, 125, 130], "140 was since `from` and not read again: gone");
        assert!(!held.pages["a"].truncated, "nothing left out since the hour began");

        // A truncated read (more since `from` than the limit) replaces what was held.
        let mut truncated = page(&[150, 160]);
        truncated.truncated = true;
        merge(&mut held, BTreeMap::from([("a".to_owned(), truncated)]), at(125), at(120), 2);
        assert_eq!(times(&held, "a"), [150, 160]);
        assert!(held.pages["a"].truncated);
    }
}
