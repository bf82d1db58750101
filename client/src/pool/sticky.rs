//! Sticky draws: the same key keeps its member, by weighted consistent hashing over the
//! pool's snapshot, and is counted in the day's hits like any draw.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::Arc;

use engine::hashing::HashRing;
use redis::Value;

use super::reply::Fields;
use super::{admin, Degrade, Draw, DrawSource, PoolError, PoolName, Pools};
use crate::connection::{is_unreachable, Breaker};
use crate::scripts;

impl Pools {
    /// Draws by weighted consistent hashing of `key` over the pool's current snapshot (ejected
    /// members left out): the same key keeps its member while the weights stay, and few keys
    /// move when one weight changes. Counted like any draw; a member at its daily cap is not
    /// given — the draw is then an ordinary one.
    #[tracing::instrument(level = "debug", skip_all, fields(pool = %pool))]
    pub async fn draw_sticky(&self, pool: &PoolName, key: &[u8]) -> Result<Draw, PoolError> {
        self.inner.draws.fetch_add(1, AtomicOrdering::Relaxed);
        let cached = self.cached_ring(pool);
        if self.inner.breaker.is_open() {
            // The ring needs no Redis: keep the key on its member, uncounted, while Redis is away.
            return match cached {
                Some((version, ring)) => {
                    let member = ring.lookup_name(key).to_owned();
                    Ok(self.served(Draw { member, pool: pool.clone(), version, source: DrawSource::Local, tier: None }))
                }
                None => self.degrade(pool, Degrade::Unreachable(Breaker::skipped_error())),
            };
        }
        let ring = match cached {
            Some(ring) => ring,
            None => match self.ring(pool).await {
                Ok(ring) => ring,
                Err(PoolError::Redis(e)) if is_unreachable(&e) => {
                    self.inner.breaker.trip();
                    return self.degrade(pool, Degrade::Unreachable(e));
                }
                Err(other) => return Err(other),
            },
        };
        let (version, ring) = ring;
        let member = ring.lookup_name(key).to_owned();
        match self.count_sticky(pool, &member).await {
            Ok(true) => {
                self.inner.breaker.reset();
                Ok(self.served(Draw { member, pool: pool.clone(), version, source: DrawSource::Redis, tier: None }))
            }
            Ok(false) => self.draw(pool).await,
            // Redis lost the pool: the key stays on its member, uncounted, until it is back.
            Err(PoolError::UnknownPool(_)) if self.knows(pool) => {
                self.note_missing(pool);
                Ok(self.served(Draw { member, pool: pool.clone(), version, source: DrawSource::Local, tier: None }))
            }
            Err(PoolError::Redis(e)) if is_unreachable(&e) => {
                self.inner.breaker.trip();
                Ok(self.served(Draw { member, pool: pool.clone(), version, source: DrawSource::Local, tier: None }))
            }
            Err(other) => Err(other),
        }
    }

    fn cached_ring(&self, pool: &PoolName) -> Option<(u64, Arc<HashRing>)> {
        self.inner.cache.lock().expect("pool cache lock").get(pool).and_then(|c| c.ring.clone())
    }

    async fn ring(&self, pool: &PoolName) -> Result<(u64, Arc<HashRing>), PoolError> {
        if let Some(ring) = self.cached_ring(pool) {
            return Ok(ring);
        }
        let mut conn = self.inner.redis.connection().await.map_err(PoolError::Redis)?;
        self.refresh(pool, &mut conn).await?;
        let mut cache = self.inner.cache.lock().expect("pool cache lock");
        let Some(entry) = cache.get_mut(pool) else { return Err(PoolError::UnknownPool(pool.clone())) };
        let snapshot = entry.snapshot.as_ref().ok_or_else(|| PoolError::UnknownPool(pool.clone()))?;
        let weights = admin::effective_weights(&snapshot.channels(), &entry.ejected)?;
        let ring = Arc::new(HashRing::new(&weights, 160));
        entry.ring = Some((snapshot.version, ring.clone()));
        Ok((snapshot.version, ring))
    }

    /// Counts a sticky draw in the day's hits unless the member is ejected or at its cap.
    async fn count_sticky(&self, pool: &PoolName, member: &str) -> Result<bool, PoolError> {
        let mut conn = self.inner.redis.connection().await.map_err(PoolError::Redis)?;
        let k = &self.inner.keys;
        let p = pool.as_str();
        for _attempt in 0..3 {
            let days = self.inner.cache.lock().expect("pool cache lock").get(pool).and_then(|c| c.days.clone());
            let (day0, day1) = days.unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
            let (w0, w1) = self.window_args(pool);
            let reply: Vec<Value> = scripts::pool()
                .count_draw
                .key(k.pool_meta(p))
                .key(k.pool_state(p))
                .key(k.pool_ejected(p))
                .key(k.pool_hits(p, &day0))
                .key(k.pool_hits(p, &day1))
                .key(k.pool_window_hits(p, &w0))
                .key(k.pool_window_hits(p, &w1))
                .key(k.pool_draw_log(p))
                .arg(&day0)
                .arg(&day1)
                .arg(self.inner.clock.script_arg())
                .arg(member)
                .arg(&w0)
                .arg(&w1)
                .invoke_async(&mut conn)
                .await
                .map_err(PoolError::Redis)?;
            let f = Fields::new("count_draw", &reply);
            match f.str(0)? {
                "counted" => {
                    // A new version (or, now and then, a new ejected set) drops the ring:
                    // the next sticky draw hashes over the current snapshot.
                    self.note_version(pool, f.uint(1)?, &mut conn).await;
                    return Ok(true);
                }
                "capped" | "ejected" | "no_day" => return Ok(false),
                "day" => {
                    let days = (f.str(1)?.to_owned(), f.str(2)?.to_owned());
                    self.inner.cache.lock().expect("pool cache lock").entry(pool.clone()).or_default().days =
                        Some(days);
                }
                "window" => {
                    let length = f.str(2)?.parse().map_err(|_| f.unexpected("window length"))?;
                    self.note_window(pool, length);
                }
                "unknown_pool" => return Err(PoolError::UnknownPool(pool.clone())),
                other => return Err(f.unexpected(other).into()),
            }
        }
        Err(PoolError::Protocol { script: "count_draw", detail: "the day changed during the call".into() })
    }
}
