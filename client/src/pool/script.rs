//! Draws in Redis: one draw, or a shared call serving several, through the draw script;
//! and the re-read of the snapshot and ejected members when a draw shows a new version.

use std::collections::HashSet;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::reply::Fields;
use super::{admin, Degrade, Draw, DrawSource, PoolError, PoolName, Pools, MAX_SKIPS};
use crate::connection::is_unreachable;
use crate::scripts;

/// The draw script's keys (in its KEYS order) and its day and window arguments for one pool,
/// for the days and cap windows they were built for.
pub(super) struct DrawKeys {
    days: Option<(String, String)>,
    windows: Option<(i64, i64)>,
    keys: Vec<String>,
    /// The two days (`-` when not known yet) and the two cap windows' starts (`-`: none).
    args: [String; 4],
    refill_channel: String,
}

impl DrawKeys {
    fn new(k: &crate::Keys, pool: &PoolName, days: Option<(String, String)>, windows: Option<(i64, i64)>) -> Self {
        let p = pool.as_str();
        let (day0, day1) = days.clone().unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
        let (w0, w1) = super::window_text(windows);
        let keys = vec![
            k.pool_meta(p),
            k.pool_state(p),
            k.pool_tickets(p),
            k.pool_standby(p),
            k.pool_ejected(p),
            k.pool_hits(p, &day0),
            k.pool_hits(p, &day1),
            k.pool_refill_flag(p),
            k.pool_tier_tickets(p, "G"),
            k.pool_tier_tickets(p, "N"),
            k.pool_tier_tickets(p, "U"),
            k.pool_tier_standby(p, "G"),
            k.pool_tier_standby(p, "N"),
            k.pool_tier_standby(p, "U"),
            k.pool_window_hits(p, &w0),
            k.pool_window_hits(p, &w1),
            k.pool_draw_log(p),
        ];
        Self { days, windows, keys, args: [day0, day1, w0, w1], refill_channel: k.pool_refill_channel() }
    }
}

/// A shared call that ended on nothing drawable, with the tickets it skipped.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exhausted {
    pub skipped_ejected: u64,
    pub skipped_capped: u64,
}

impl Pools {
    /// Up to `n` draws in one script call, in order; fewer when the pool ran out of
    /// drawable tickets part way, none on any error (each draw then goes alone, where
    /// the error is handled). An unreachable Redis trips the breaker. With the draws, where
    /// they were counted (`None` for one draw).
    pub(super) async fn draw_redis_shared(
        &self,
        pool: &PoolName,
        n: usize,
    ) -> (Vec<Draw>, Option<super::lease::Counted>, Option<Exhausted>) {
        if n == 1 {
            return match self.draw_redis(pool).await {
                Ok(Ok(draw)) => (vec![draw], None, None),
                Ok(Err(Degrade::Unreachable(_))) => {
                    self.inner.breaker.trip();
                    (Vec::new(), None, None)
                }
                Err(PoolError::Exhausted { skipped_ejected, skipped_capped, .. }) => {
                    (Vec::new(), None, Some(Exhausted { skipped_ejected, skipped_capped }))
                }
                _ => (Vec::new(), None, None),
            };
        }
        let mut conn = match self.inner.redis.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                if is_unreachable(&e) {
                    self.inner.breaker.trip();
                }
                return (Vec::new(), None, None);
            }
        };
        for _attempt in 0..3 {
            let call = self.draw_call(pool, n);
            let started = Instant::now();
            let reply = match call.invoke_async::<Vec<Value>>(&mut conn).await {
                Ok(reply) => reply,
                Err(e) => {
                    if is_unreachable(&e) {
                        self.inner.breaker.trip();
                    }
                    return (Vec::new(), None, None);
                }
            };
            if let Some(m) = &self.inner.metrics {
                m.script_seconds.with_label_values(&["draw_ticket"]).observe(started.elapsed().as_secs_f64());
            }
            let f = Fields::new("draw_ticket", &reply);
            // Where the tickets were counted (day) and which list they came from (rebuilds).
            let at = if f.str(0) == Ok("many") { 6 } else { 2 };
            let day = match (f.str(at), f.str(at + 1)) {
                (Ok(day), Ok(rebuilds)) => {
                    Some(super::lease::Counted { day: day.to_owned(), rebuilds: rebuilds.to_owned() })
                }
                _ => None,
            };
            match f.str(0) {
                Ok("many") => {
                    let Ok(draws) = self.many(pool, &f, reply.len()) else { return (Vec::new(), None, None) };
                    if let Some(d) = draws.last() {
                        self.note_version(pool, d.version, &mut conn).await;
                    }
                    return (draws, day, None);
                }
                Ok("batch") => {
                    let Ok(replies) = f.array(1) else { return (Vec::new(), None, None) };
                    let mut draws = Vec::with_capacity(replies.len());
                    let mut version = None;
                    let mut exhausted = None;
                    for r in replies {
                        let reply = Fields::new("draw_ticket", r);
                        match self.ticket(pool, &reply) {
                            Ok(Some(draw)) => {
                                version = Some(draw.version);
                                draws.push(draw);
                            }
                            _ => {
                                // Nothing drawable: the draws left are answered so, not sent
                                // alone (each would skip tickets again, or find the list
                                // empty and serve locally past the caps).
                                if let (Ok("exhausted"), Ok(e), Ok(c)) = (reply.str(0), reply.uint(2), reply.uint(3)) {
                                    exhausted = Some(Exhausted { skipped_ejected: e, skipped_capped: c });
                                }
                                break;
                            }
                        }
                    }
                    if let Some(v) = version {
                        self.note_version(pool, v, &mut conn).await;
                    }
                    return (draws, day, exhausted);
                }
                Ok("day") => {
                    if let (Ok(d0), Ok(d1)) = (f.str(1), f.str(2)) {
                        let days = (d0.to_owned(), d1.to_owned());
                        self.inner.cache.lock().expect("pool cache lock").entry(pool.clone()).or_default().days =
                            Some(days);
                        continue;
                    }
                    return (Vec::new(), None, None);
                }
                Ok("window") => match f.str(2).ok().and_then(|l| l.parse().ok()) {
                    Some(length) => {
                        self.note_window(pool, length);
                        continue;
                    }
                    None => return (Vec::new(), None, None),
                },
                _ => return (Vec::new(), None, None),
            }
        }
        (Vec::new(), None, None)
    }

    /// The compact reply of a shared call (`{"many", version, length, flagged, from_list,
    /// ended_empty, day, rebuilds, member, ...}`) as draws, in order.
    fn many(&self, pool: &PoolName, f: &Fields<'_>, len: usize) -> Result<Vec<Draw>, PoolError> {
        let version = f.uint(1)?;
        if let Some(m) = &self.inner.metrics {
            m.list_length.with_label_values(&[pool.as_str()]).set(f.int(2)?);
        }
        (8..len)
            .map(|i| {
                Ok(Draw {
                    member: f.str(i)?.to_owned(),
                    pool: pool.clone(),
                    version,
                    source: DrawSource::Redis,
                    tier: None,
                })
            })
            .collect()
    }

    /// The draw script's call for `n` draws of `pool`, with the days this client last saw.
    /// Its 17 keys and the day and window arguments are built once per pool and again only
    /// when the days or the cap windows change (a known pool's; a pool this client has no
    /// entry for gets them built for the call, and no entry).
    fn draw_call(&self, pool: &PoolName, n: usize) -> redis::ScriptInvocation<'static> {
        let keys = {
            let mut cache = self.inner.cache.lock().expect("pool cache lock");
            match cache.get_mut(pool) {
                Some(entry) => {
                    let windows = self.window_starts(entry.window_ms);
                    let fresh = entry.draw_keys.as_ref().is_some_and(|k| k.days == entry.days && k.windows == windows);
                    if !fresh {
                        entry.draw_keys =
                            Some(Arc::new(DrawKeys::new(&self.inner.keys, pool, entry.days.clone(), windows)));
                    }
                    entry.draw_keys.clone().expect("set above")
                }
                None => Arc::new(DrawKeys::new(&self.inner.keys, pool, None, None)),
            }
        };
        let mut call = scripts::pool().draw.key(&keys.keys[0]);
        for key in &keys.keys[1..] {
            call.key(key);
        }
        let [day0, day1, w0, w1] = &keys.args;
        call.arg(day0)
            .arg(day1)
            .arg(self.inner.clock.script_arg())
            .arg(MAX_SKIPS)
            .arg(&keys.refill_channel)
            .arg(pool.as_str())
            .arg(n)
            .arg(w0)
            .arg(w1);
        call
    }

    /// A `ticket` reply as a draw (its skips and the list length counted in the metrics);
    /// `None` for any other reply.
    fn ticket(&self, pool: &PoolName, f: &Fields<'_>) -> Result<Option<Draw>, PoolError> {
        if f.str(0)? != "ticket" {
            return Ok(None);
        }
        let p = pool.as_str();
        let version = f.uint(2)?;
        let (skipped_ejected, skipped_capped) = (f.uint(4)?, f.uint(5)?);
        if let Some(m) = &self.inner.metrics {
            if skipped_ejected > 0 {
                m.skips.with_label_values(&[p, "ejected"]).inc_by(skipped_ejected);
            }
            if skipped_capped > 0 {
                m.skips.with_label_values(&[p, "capped"]).inc_by(skipped_capped);
            }
            m.list_length.with_label_values(&[p]).set(f.int(6)?);
        }
        let tier = f.str(9).ok().filter(|t| !t.is_empty()).map(str::to_owned);
        Ok(Some(Draw { member: f.str(1)?.to_owned(), pool: pool.clone(), version, source: DrawSource::Redis, tier }))
    }

    /// One draw in Redis: the ticket, or why the chain must degrade; hard errors as Err.
    pub(super) async fn draw_redis(&self, pool: &PoolName) -> Result<Result<Draw, Degrade>, PoolError> {
        let mut conn = match self.inner.redis.connection().await {
            Ok(conn) => conn,
            Err(e) if is_unreachable(&e) => return Ok(Err(Degrade::Unreachable(e))),
            Err(e) => return Err(PoolError::Redis(e)),
        };
        let p = pool.as_str();
        for _attempt in 0..3 {
            let call = self.draw_call(pool, 1);
            let started = Instant::now();
            let mut result = call.invoke_async::<Vec<Value>>(&mut conn).await;
            if let Err(e) = &result {
                // After an outage the connection reports the failed reconnect once. Retry
                // only when nothing reached Redis (a refused connection): a draw sent on a
                // connection that then dropped may have run, and a retry would pop twice.
                if e.is_connection_refusal() {
                    result = call.invoke_async::<Vec<Value>>(&mut conn).await;
                }
            }
            let reply = match result {
                Ok(reply) => reply,
                Err(e) if is_unreachable(&e) => return Ok(Err(Degrade::Unreachable(e))),
                Err(e) => return Err(PoolError::Redis(e)),
            };
            if let Some(m) = &self.inner.metrics {
                m.script_seconds.with_label_values(&["draw_ticket"]).observe(started.elapsed().as_secs_f64());
            }
            let f = Fields::new("draw_ticket", &reply);
            match f.str(0)? {
                "ticket" => {
                    let draw = self.ticket(pool, &f)?.expect("a ticket reply");
                    self.note_version(pool, draw.version, &mut conn).await;
                    return Ok(Ok(draw));
                }
                "day" => {
                    let days = (f.str(1)?.to_owned(), f.str(2)?.to_owned());
                    self.inner.cache.lock().expect("pool cache lock").entry(pool.clone()).or_default().days =
                        Some(days);
                    continue;
                }
                "window" => {
                    let length = f.str(2)?.parse().map_err(|_| f.unexpected("window length"))?;
                    self.note_window(pool, length);
                    continue;
                }
                "empty" => {
                    if let Some(m) = &self.inner.metrics {
                        m.empty.with_label_values(&[p]).inc();
                    }
                    self.note_version(pool, f.uint(1)?, &mut conn).await;
                    return Ok(Err(Degrade::Empty));
                }
                "no_day" => {
                    tracing::warn!(pool = %pool, "no current day in redis: is the rotation job running?");
                    self.note_version(pool, f.uint(1)?, &mut conn).await;
                    return Ok(Err(Degrade::Empty));
                }
                "exhausted" => {
                    return Err(PoolError::Exhausted {
                        pool: pool.clone(),
                        skipped_ejected: f.uint(2)?,
                        skipped_capped: f.uint(3)?,
                    })
                }
                "unknown_pool" => {
                    if self.knows(pool) {
                        // Redis lost the pool (a restart, an empty replica): served from the
                        // local pool while the control plane republishes it.
                        self.note_missing(pool);
                        return Ok(Err(Degrade::Missing));
                    }
                    return Err(PoolError::UnknownPool(pool.clone()));
                }
                other => return Err(f.unexpected(other).into()),
            }
        }
        Err(PoolError::Protocol { script: "draw_ticket", detail: "the day or window changed during the call".into() })
    }

    /// Re-reads the snapshot and the ejected members when the version is new to this client.
    pub(super) async fn note_version(&self, pool: &PoolName, version: u64, conn: &mut crate::RedisConnection) {
        let known = self
            .inner
            .cache
            .lock()
            .expect("pool cache lock")
            .get(pool)
            .and_then(|c| c.snapshot.as_ref().map(|s| s.version));
        // Re-read the ejected set every 1024 draws too: ejection does not change the version.
        let periodic = self.inner.draws.load(AtomicOrdering::Relaxed).is_multiple_of(1024);
        if known == Some(version) && !periodic {
            return;
        }
        let _ = self.refresh(pool, conn).await;
    }

    pub(super) async fn refresh(&self, pool: &PoolName, conn: &mut crate::RedisConnection) -> Result<(), PoolError> {
        let snapshot = admin::read_snapshot(conn, &self.inner.keys, pool).await?;
        let ejected: HashSet<String> = redis::cmd("SMEMBERS")
            .arg(self.inner.keys.pool_ejected(pool.as_str()))
            .query_async(conn)
            .await
            .map_err(PoolError::Redis)?;
        let mut cache = self.inner.cache.lock().expect("pool cache lock");
        // A name no snapshot was ever seen for gets no entry: names sent from outside must
        // not grow the cache.
        let entry = match (cache.get_mut(pool), &snapshot) {
            (Some(entry), _) => entry,
            (None, Some(_)) => cache.entry(pool.clone()).or_default(),
            (None, None) => return Ok(()),
        };
        let changed = entry.snapshot.as_ref().map(|s| s.version) != snapshot.as_ref().map(|s| s.version)
            || entry.ejected != ejected;
        if changed {
            entry.local = None;
            entry.ring = None;
        }
        // A snapshot Redis no longer holds stays known: the local pool serves from it.
        if snapshot.is_some() {
            entry.snapshot = snapshot;
        }
        entry.ejected = ejected;
        Ok(())
    }
}
