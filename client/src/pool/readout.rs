//! What Redis holds of a pool at one moment, read in one round trip: its lists' lengths,
//! its ejected members, its day counters and its batch counter. The pool sampler reads
//! these; only this crate knows which keys hold them.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::NaiveDate;
use engine::Tier;
use serde::{Deserialize, Serialize};

use super::{PoolAdmin, PoolError, PoolKind, PoolName, PoolSnapshot};

/// One list's length: the tickets in it and in its standby batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListLength {
    pub tickets: u64,
    pub standby: u64,
}

/// A pool's lists and counters as Redis holds them at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOut {
    /// The pool's main list.
    pub main: ListLength,
    /// A `tiers` pool's tier lists by tier (`G`, `N`, `U`); `None` for a `channels` pool.
    pub tiers: Option<BTreeMap<String, ListLength>>,
    /// The members ejected now.
    pub ejected: HashSet<String>,
    /// Each member's draws on the day read so far (its day counter).
    pub hits: HashMap<String, u64>,
    /// Batches ever added to the pool's lists (the refill sequence numbers of the main list
    /// and of each tier's, summed); `None` when Redis holds no counter.
    pub batches: Option<u64>,
}

fn value<T: redis::FromRedisValue>(values: &[redis::Value], i: usize) -> Result<T, PoolError> {
    let protocol = |detail: String| PoolError::Protocol { script: "pool read-out", detail };
    let v = values.get(i).ok_or_else(|| protocol(format!("pipeline reply {i} missing")))?;
    redis::from_redis_value(v).map_err(|e| protocol(format!("pipeline reply {i}: {e}")))
}

impl PoolAdmin {
    /// What Redis holds of `pool` now, with the day counters of `day` (the pool-local day
    /// the caller samples); `snapshot` says which tier lists there are.
    #[tracing::instrument(skip_all, fields(pool = %pool, day = %day), err)]
    pub async fn read_out(
        &self,
        pool: &PoolName,
        snapshot: &PoolSnapshot,
        day: NaiveDate,
    ) -> Result<ReadOut, PoolError> {
        let (k, p) = (&self.keys, pool.as_str());
        let tiers: Vec<Tier> = match snapshot.kind {
            PoolKind::Tiers => snapshot.tiers.keys().copied().collect(),
            PoolKind::Channels => Vec::new(),
        };
        let mut pipe = redis::pipe();
        pipe.cmd("LLEN").arg(k.pool_tickets(p));
        pipe.cmd("LLEN").arg(k.pool_standby(p));
        pipe.cmd("SMEMBERS").arg(k.pool_ejected(p));
        pipe.cmd("HGETALL").arg(k.pool_hits(p, &day.to_string()));
        for tier in &tiers {
            pipe.cmd("LLEN").arg(k.pool_tier_tickets(p, tier.as_str()));
            pipe.cmd("LLEN").arg(k.pool_tier_standby(p, tier.as_str()));
        }
        // The refill script's sequence field of each list (see lua/refill_pool.lua).
        pipe.cmd("HMGET").arg(k.pool_state(p)).arg("seq");
        for tier in &tiers {
            pipe.arg(format!("seq:{}", tier.as_str()));
        }
        let values: Vec<redis::Value> = pipe.query_async(&mut self.conn().await?).await.map_err(PoolError::Redis)?;
        let mut lanes = BTreeMap::new();
        for (i, tier) in tiers.iter().enumerate() {
            lanes.insert(
                tier.as_str().to_owned(),
                ListLength { tickets: value(&values, 4 + 2 * i)?, standby: value(&values, 5 + 2 * i)? },
            );
        }
        let seqs: Vec<Option<u64>> = value(&values, 4 + 2 * tiers.len())?;
        Ok(ReadOut {
            main: ListLength { tickets: value(&values, 0)?, standby: value(&values, 1)? },
            tiers: (snapshot.kind == PoolKind::Tiers).then_some(lanes),
            ejected: value(&values, 2)?,
            hits: value(&values, 3)?,
            batches: seqs.iter().flatten().copied().reduce(u64::saturating_add),
        })
    }

    /// Each member's draws on `day` as its counter stands now (a day's counters outlive it
    /// by 48 h: after a midnight, what the earlier day counted last).
    #[tracing::instrument(skip_all, fields(pool = %pool, day = %day), err)]
    pub async fn day_hits(&self, pool: &PoolName, day: NaiveDate) -> Result<HashMap<String, u64>, PoolError> {
        redis::cmd("HGETALL")
            .arg(self.keys.pool_hits(pool.as_str(), &day.to_string()))
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)
    }

    /// Gives a pool's day counters back from a sample (after Redis lost them): each
    /// member's draws on `day` become at least `hits`; a counter never goes down. Returns
    /// how many were raised.
    pub async fn restore_day_hits(
        &self,
        pool: &PoolName,
        day: NaiveDate,
        hits: &[(String, u64)],
    ) -> Result<u64, PoolError> {
        // The day's hash lives 48 h past the day's end; three days from now covers it.
        let expires = chrono::Utc::now().timestamp_millis() + 72 * 3600 * 1000;
        self.restore_hits(self.keys.pool_hits(pool.as_str(), &day.to_string()), expires, hits).await
    }

    /// Raises the counters of the hits hash `key` to at least `hits` (`restore_hits.lua`),
    /// making it expire at `expires_ms` when it had no expiry; returns how many were raised.
    async fn restore_hits(&self, key: String, expires_ms: i64, hits: &[(String, u64)]) -> Result<u64, PoolError> {
        if hits.is_empty() {
            return Ok(0);
        }
        let mut call = crate::scripts::pool().restore_hits.key(key);
        call.arg(expires_ms);
        for (member, n) in hits {
            call.arg(member).arg(n);
        }
        call.invoke_async(&mut self.conn().await?).await.map_err(PoolError::Redis)
    }

    /// Whether Redis holds the pool's counters of the short cap window starting at
    /// `start_ms` (a Redis that lost the pool holds none).
    pub async fn window_hits_exist(&self, pool: &PoolName, start_ms: i64) -> Result<bool, PoolError> {
        redis::cmd("EXISTS")
            .arg(self.keys.pool_window_hits(pool.as_str(), &start_ms.to_string()))
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)
    }

    /// Gives a pool's counters of one short cap window back (after Redis lost them): each
    /// member's draws in the window starting at `start_ms` (of `minutes`) become at least
    /// `hits`; a counter never goes down. The hash expires one window after the window
    /// ends, as the draw script makes it. Returns how many were raised.
    pub async fn restore_window_hits(
        &self,
        pool: &PoolName,
        start_ms: i64,
        minutes: u32,
        hits: &[(String, u64)],
    ) -> Result<u64, PoolError> {
        let length = i64::from(minutes) * 60_000;
        let key = self.keys.pool_window_hits(pool.as_str(), &start_ms.to_string());
        self.restore_hits(key, start_ms + 2 * length, hits).await
    }
}
