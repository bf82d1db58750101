//! Ticket pools: draw the next ticket in one script call, with a degradation chain when
//! Redis cannot be reached (DESIGN §3).
//!
//! [`Pools::draw`] pops from the pool's list in Redis. When Redis is unreachable (or has no
//! ticket to give), the draw is served by a local in-process pool built with the engine from
//! the last snapshot this client saw, and failing that by plain weighted random over the
//! static weights the application configured. Each draw says which level served it; each
//! change of level is logged once and every draw is counted by source. The client goes
//! back to Redis by itself on the next draw that gets an answer.
//!
//! Concurrent draws of one pool are coalesced: while one script call is in flight, the
//! draws that arrive wait and then go together in the next call (up to
//! [`DEFAULT_COALESCE`]), each drawn in turn exactly as a single draw would be. Under load
//! this turns many round trips into one; alone, a draw is one call as before. A draw the
//! shared call could not serve (the pool ran empty, a refusal, Redis away) takes the
//! single-draw path with its degradation chain.
//! [`admin`] holds the control plane's side: publish, rotate, refill, eject.

pub mod admin;
mod types;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use engine::hashing::HashRing;
use engine::order::build_batch;
use engine::selector::AliasTable;
use engine::{Apportioner, BatchSize, Weights};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use redis::Value;
use serde::Serialize;

pub use self::admin::{Days, EjectOutcome, PoolAdmin, RefillOutcome, ReweightMode};
pub use self::types::{PoolKind, PoolName, PoolSnapshot, MAX_BATCH};
use crate::clock::Clock;
use crate::connection::{is_unreachable, Breaker, RedisHandle};
use crate::keys::Keys;
use crate::metrics::PoolMetrics;
use crate::quota::InvalidInput;
use crate::reply::{Fields, ReplyError};
use crate::scripts;

pub(crate) mod reply {
    pub(crate) use crate::reply::Fields;
}

/// The most tickets one draw skips (ejected or capped members) before it answers
/// `exhausted` instead of looping.
pub const MAX_SKIPS: u32 = 64;

/// The most concurrent draws of one pool that share one script call.
pub const DEFAULT_COALESCE: usize = 64;

/// The draws of one pool waiting for the next shared call, and whether a task runs them.
#[derive(Default)]
struct Waiting {
    senders: Vec<tokio::sync::oneshot::Sender<Option<Draw>>>,
    running: bool,
}

/// Why a draw or a pool operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// No snapshot has been published for this pool.
    #[error("unknown pool {0:?}")]
    UnknownPool(PoolName),
    /// Every ticket looked at belonged to an ejected or capped member.
    #[error(
        "pool {pool:?}: no drawable member ({skipped_ejected} ejected and {skipped_capped} capped tickets skipped)"
    )]
    Exhausted { pool: PoolName, skipped_ejected: u64, skipped_capped: u64 },
    /// Redis is unreachable and this client has neither a snapshot nor static weights.
    #[error("pool {pool:?}: redis unreachable and no local snapshot or static weights: {source}")]
    Unavailable { pool: PoolName, source: redis::RedisError },
    /// A configuration that breaks a rule.
    #[error("{0}")]
    Invalid(InvalidInput),
    /// No member has weight left (all ejected or zero).
    #[error("no member can be drawn: {0}")]
    NothingDrawable(String),
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("unexpected reply from {script}: {detail}")]
    Protocol { script: &'static str, detail: String },
}

impl From<ReplyError> for PoolError {
    fn from(e: ReplyError) -> Self {
        Self::Protocol { script: e.script, detail: e.detail }
    }
}

/// Which level of the degradation chain served a draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DrawSource {
    /// The shared pool in Redis: the exact, global sequence.
    Redis,
    /// This process's pool, built from the last snapshot it saw.
    Local,
    /// Weighted random over the static weights the application configured.
    Static,
}

impl DrawSource {
    /// The name in replies, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Local => "local",
            Self::Static => "static",
        }
    }
}

/// One drawn ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Draw {
    pub member: String,
    pub pool: PoolName,
    /// The snapshot version the ticket came from (0 for a static draw).
    pub version: u64,
    pub source: DrawSource,
    /// For a `tiers` pool drawn in Redis: the tier that served the draw (after the
    /// fallback mapping when the drawn tier had no channel left).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

struct LocalPool {
    version: u64,
    weights: Weights,
    apportioner: Apportioner,
    ordering: engine::Ordering,
    batch: BatchSize,
    queue: VecDeque<usize>,
}

impl LocalPool {
    fn next(&mut self, rng: &mut ChaCha8Rng) -> usize {
        if self.queue.is_empty() {
            let counts = self.apportioner.next_counts(self.batch);
            let tail = engine::order::TailRun::of(&[]);
            self.queue.extend(build_batch(self.ordering, &counts, tail, rng));
        }
        self.queue.pop_front().expect("a batch of at least one ticket")
    }
}

#[derive(Default)]
struct Cached {
    snapshot: Option<PoolSnapshot>,
    ejected: HashSet<String>,
    days: Option<(String, String)>,
    local: Option<LocalPool>,
    ring: Option<(u64, Arc<HashRing>)>,
    level: Option<DrawSource>,
}

struct Inner {
    redis: RedisHandle,
    keys: Keys,
    clock: Clock,
    statics: HashMap<PoolName, AliasTable>,
    static_weights: HashMap<PoolName, Weights>,
    metrics: Option<PoolMetrics>,
    cache: Mutex<HashMap<PoolName, Cached>>,
    breaker: Breaker,
    rng: Mutex<ChaCha8Rng>,
    draws: AtomicU64,
    coalesce: AtomicUsize,
    waiting: Mutex<HashMap<PoolName, Waiting>>,
}

/// The pool client: cheap to clone, shared by every task of a process.
#[derive(Clone)]
pub struct Pools {
    inner: Arc<Inner>,
}

impl Pools {
    /// A client over `redis` under `keys`. `statics`: the last resort when Redis is
    /// unreachable and no snapshot was seen (typically from the application's own config).
    pub fn new(
        redis: RedisHandle,
        keys: Keys,
        clock: Clock,
        statics: HashMap<PoolName, Weights>,
        metrics: Option<PoolMetrics>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                redis,
                keys,
                clock,
                statics: statics.iter().map(|(p, w)| (p.clone(), AliasTable::new(w))).collect(),
                static_weights: statics,
                metrics,
                cache: Mutex::new(HashMap::new()),
                breaker: Breaker::default(),
                rng: Mutex::new(ChaCha8Rng::seed_from_u64(crate::fresh_seed())),
                draws: AtomicU64::new(0),
                coalesce: AtomicUsize::new(DEFAULT_COALESCE),
                waiting: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sets how many concurrent draws of one pool may share a script call (at least 1;
    /// 1: every draw makes its own call).
    pub fn set_coalescing(&self, max: usize) {
        self.inner.coalesce.store(max.max(1), AtomicOrdering::Relaxed);
    }

    /// Draws the next ticket of `pool`.
    #[tracing::instrument(level = "debug", skip_all, fields(pool = %pool))]
    pub async fn draw(&self, pool: &PoolName) -> Result<Draw, PoolError> {
        self.inner.draws.fetch_add(1, AtomicOrdering::Relaxed);
        if self.inner.breaker.is_open() {
            return self.degrade(pool, Degrade::Unreachable(Breaker::skipped_error()));
        }
        if self.inner.coalesce.load(AtomicOrdering::Relaxed) > 1 {
            if let Some(draw) = self.coalesced(pool).await {
                self.inner.breaker.reset();
                return Ok(self.served(draw));
            }
            // Not served by the shared call: this draw goes alone, with the whole chain.
            if self.inner.breaker.is_open() {
                return self.degrade(pool, Degrade::Unreachable(Breaker::skipped_error()));
            }
        }
        match self.draw_redis(pool).await {
            Ok(Ok(draw)) => {
                self.inner.breaker.reset();
                Ok(self.served(draw))
            }
            Ok(Err(why)) => {
                if matches!(why, Degrade::Unreachable(_)) {
                    self.inner.breaker.trip();
                }
                self.degrade(pool, why)
            }
            Err(e) => Err(e),
        }
    }

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
            Err(PoolError::Redis(e)) if is_unreachable(&e) => {
                self.inner.breaker.trip();
                Ok(self.served(Draw { member, pool: pool.clone(), version, source: DrawSource::Local, tier: None }))
            }
            Err(other) => Err(other),
        }
    }

    fn served(&self, draw: Draw) -> Draw {
        let mut cache = self.inner.cache.lock().expect("pool cache lock");
        // The pool's entry exists after its first draw: no key allocated per draw.
        let entry = match cache.get_mut(&draw.pool) {
            Some(entry) => entry,
            None => cache.entry(draw.pool.clone()).or_default(),
        };
        if entry.level != Some(draw.source) {
            match draw.source {
                DrawSource::Redis if entry.level.is_some() => {
                    tracing::info!(pool = %draw.pool, "draws served by redis again")
                }
                DrawSource::Redis => {}
                other => tracing::warn!(pool = %draw.pool, source = other.name(), "draws degraded"),
            }
            entry.level = Some(draw.source);
        }
        if let Some(m) = &self.inner.metrics {
            m.draws.with_label_values(&[draw.pool.as_str(), &draw.member, draw.source.name()]).inc();
        }
        draw
    }

    /// Waits for this draw's turn in the pool's next shared call; `None` when that call
    /// could not serve it (the caller then draws alone).
    async fn coalesced(&self, pool: &PoolName) -> Option<Draw> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut waiting = self.inner.waiting.lock().expect("draw queue lock");
            let w = match waiting.get_mut(pool) {
                Some(w) => w,
                None => waiting.entry(pool.clone()).or_default(),
            };
            w.senders.push(tx);
            !std::mem::replace(&mut w.running, true)
        };
        if start {
            let this = self.clone();
            let pool = pool.clone();
            tokio::spawn(async move { this.run_waiting(pool).await });
        }
        rx.await.ok().flatten()
    }

    /// Serves the pool's waiting draws, a shared call at a time, until none wait.
    async fn run_waiting(&self, pool: PoolName) {
        // Whatever happens to this task, no draw is left waiting for it: on the way out the
        // queue is marked idle and any senders left are dropped (their draws go alone).
        struct Idle<'a>(&'a Pools, &'a PoolName);
        impl Drop for Idle<'_> {
            fn drop(&mut self) {
                if let Ok(mut waiting) = self.0.inner.waiting.lock() {
                    if let Some(w) = waiting.get_mut(self.1) {
                        w.running = false;
                        w.senders.clear();
                    }
                }
            }
        }
        let _idle = Idle(self, &pool);
        loop {
            let max = self.inner.coalesce.load(AtomicOrdering::Relaxed);
            let batch: Vec<_> = {
                let mut waiting = self.inner.waiting.lock().expect("draw queue lock");
                let w = waiting.entry(pool.clone()).or_default();
                // A caller that gave up is not served: no ticket is popped for nobody.
                w.senders.retain(|s| !s.is_closed());
                if w.senders.is_empty() {
                    w.running = false;
                    return;
                }
                let n = w.senders.len().min(max);
                w.senders.drain(..n).collect()
            };
            let mut draws = self.draw_redis_shared(&pool, batch.len()).await.into_iter();
            for tx in batch {
                let _ = tx.send(draws.next());
            }
        }
    }

    /// Up to `n` draws in one script call, in order; fewer when the pool ran out of
    /// drawable tickets part way, none on any error (each draw then goes alone, where
    /// the error is handled). An unreachable Redis trips the breaker.
    async fn draw_redis_shared(&self, pool: &PoolName, n: usize) -> Vec<Draw> {
        if n == 1 {
            return match self.draw_redis(pool).await {
                Ok(Ok(draw)) => vec![draw],
                Ok(Err(Degrade::Unreachable(_))) => {
                    self.inner.breaker.trip();
                    Vec::new()
                }
                _ => Vec::new(),
            };
        }
        let mut conn = match self.inner.redis.connection().await {
            Ok(conn) => conn,
            Err(e) => {
                if is_unreachable(&e) {
                    self.inner.breaker.trip();
                }
                return Vec::new();
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
                    return Vec::new();
                }
            };
            if let Some(m) = &self.inner.metrics {
                m.script_seconds.with_label_values(&["draw_ticket"]).observe(started.elapsed().as_secs_f64());
            }
            let f = Fields::new("draw_ticket", &reply);
            match f.str(0) {
                Ok("many") => {
                    let Ok(draws) = self.many(pool, &f, reply.len()) else { return Vec::new() };
                    if let Some(d) = draws.last() {
                        self.note_version(pool, d.version, &mut conn).await;
                    }
                    return draws;
                }
                Ok("batch") => {
                    let Ok(replies) = f.array(1) else { return Vec::new() };
                    let mut draws = Vec::with_capacity(replies.len());
                    let mut version = None;
                    for r in replies {
                        match self.ticket(pool, &Fields::new("draw_ticket", r)) {
                            Ok(Some(draw)) => {
                                version = Some(draw.version);
                                draws.push(draw);
                            }
                            _ => break,
                        }
                    }
                    if let Some(v) = version {
                        self.note_version(pool, v, &mut conn).await;
                    }
                    return draws;
                }
                Ok("day") => {
                    if let (Ok(d0), Ok(d1)) = (f.str(1), f.str(2)) {
                        let days = (d0.to_owned(), d1.to_owned());
                        self.inner.cache.lock().expect("pool cache lock").entry(pool.clone()).or_default().days =
                            Some(days);
                        continue;
                    }
                    return Vec::new();
                }
                _ => return Vec::new(),
            }
        }
        Vec::new()
    }

    /// The compact reply of a shared call (`{"many", version, length, flagged, from_list,
    /// ended_empty, member, ...}`) as draws, in order.
    fn many(&self, pool: &PoolName, f: &Fields<'_>, len: usize) -> Result<Vec<Draw>, PoolError> {
        let version = f.uint(1)?;
        if let Some(m) = &self.inner.metrics {
            m.list_length.with_label_values(&[pool.as_str()]).set(f.int(2)?);
        }
        (6..len)
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
    fn draw_call(&self, pool: &PoolName, n: usize) -> redis::ScriptInvocation<'static> {
        let k = &self.inner.keys;
        let p = pool.as_str();
        let days = self.inner.cache.lock().expect("pool cache lock").get(pool).and_then(|c| c.days.clone());
        let (day0, day1) = days.unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
        let mut call = scripts::pool().draw.key(k.pool_meta(p));
        call.key(k.pool_state(p))
            .key(k.pool_tickets(p))
            .key(k.pool_standby(p))
            .key(k.pool_ejected(p))
            .key(k.pool_hits(p, &day0))
            .key(k.pool_hits(p, &day1))
            .key(k.pool_refill_flag(p))
            .key(k.pool_tier_tickets(p, "G"))
            .key(k.pool_tier_tickets(p, "N"))
            .key(k.pool_tier_tickets(p, "U"))
            .key(k.pool_tier_standby(p, "G"))
            .key(k.pool_tier_standby(p, "N"))
            .key(k.pool_tier_standby(p, "U"))
            .arg(&day0)
            .arg(&day1)
            .arg(self.inner.clock.script_arg())
            .arg(MAX_SKIPS)
            .arg(k.pool_refill_channel())
            .arg(p)
            .arg(n);
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
    async fn draw_redis(&self, pool: &PoolName) -> Result<Result<Draw, Degrade>, PoolError> {
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
                "unknown_pool" => return Err(PoolError::UnknownPool(pool.clone())),
                other => return Err(f.unexpected(other).into()),
            }
        }
        Err(PoolError::Protocol { script: "draw_ticket", detail: "the day changed during the call".into() })
    }

    /// Re-reads the snapshot and the ejected members when the version is new to this client.
    async fn note_version(&self, pool: &PoolName, version: u64, conn: &mut redis::aio::ConnectionManager) {
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

    async fn refresh(&self, pool: &PoolName, conn: &mut redis::aio::ConnectionManager) -> Result<(), PoolError> {
        let snapshot = admin::read_snapshot(conn, &self.inner.keys, pool).await?;
        let ejected: HashSet<String> = redis::cmd("SMEMBERS")
            .arg(self.inner.keys.pool_ejected(pool.as_str()))
            .query_async(conn)
            .await
            .map_err(PoolError::Redis)?;
        let mut cache = self.inner.cache.lock().expect("pool cache lock");
        let entry = cache.entry(pool.clone()).or_default();
        let changed = entry.snapshot.as_ref().map(|s| s.version) != snapshot.as_ref().map(|s| s.version)
            || entry.ejected != ejected;
        if changed {
            entry.local = None;
            entry.ring = None;
        }
        entry.snapshot = snapshot;
        entry.ejected = ejected;
        Ok(())
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
        let entry = cache.entry(pool.clone()).or_default();
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
            let reply: Vec<Value> = scripts::pool()
                .count_draw
                .key(k.pool_meta(p))
                .key(k.pool_state(p))
                .key(k.pool_ejected(p))
                .key(k.pool_hits(p, &day0))
                .key(k.pool_hits(p, &day1))
                .arg(&day0)
                .arg(&day1)
                .arg(self.inner.clock.script_arg())
                .arg(member)
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
                "unknown_pool" => return Err(PoolError::UnknownPool(pool.clone())),
                other => return Err(f.unexpected(other).into()),
            }
        }
        Err(PoolError::Protocol { script: "count_draw", detail: "the day changed during the call".into() })
    }

    /// Serves a draw from the next level down: the local pool, else static weights.
    fn degrade(&self, pool: &PoolName, why: Degrade) -> Result<Draw, PoolError> {
        let mut rng = self.inner.rng.lock().expect("rng lock");
        {
            let mut cache = self.inner.cache.lock().expect("pool cache lock");
            let entry = cache.entry(pool.clone()).or_default();
            if entry.local.is_none() {
                if let Some(snapshot) = &entry.snapshot {
                    if let Ok(weights) = admin::effective_weights(&snapshot.channels(), &entry.ejected) {
                        if let Ok(batch) = BatchSize::new(u64::from(snapshot.batch_size), MAX_BATCH) {
                            entry.local = Some(LocalPool {
                                version: snapshot.version,
                                apportioner: Apportioner::new(weights.clone()),
                                weights,
                                ordering: snapshot.ordering,
                                batch,
                                queue: VecDeque::new(),
                            });
                        }
                    }
                }
            }
            if let Some(local) = entry.local.as_mut() {
                let i = local.next(&mut rng);
                let draw = Draw {
                    member: local.weights.name(i).to_owned(),
                    pool: pool.clone(),
                    version: local.version,
                    source: DrawSource::Local,
                    tier: None,
                };
                drop(cache);
                return Ok(self.served(draw));
            }
        }
        if let (Some(table), Some(weights)) = (self.inner.statics.get(pool), self.inner.static_weights.get(pool)) {
            let i = table.pick(&mut *rng);
            let draw = Draw {
                member: weights.name(i).to_owned(),
                pool: pool.clone(),
                version: 0,
                source: DrawSource::Static,
                tier: None,
            };
            return Ok(self.served(draw));
        }
        match why {
            Degrade::Unreachable(source) => Err(PoolError::Unavailable { pool: pool.clone(), source }),
            Degrade::Empty => Err(PoolError::Exhausted { pool: pool.clone(), skipped_ejected: 0, skipped_capped: 0 }),
        }
    }
}

/// Why a draw left Redis.
enum Degrade {
    Unreachable(redis::RedisError),
    /// Redis answered but had no ticket (the refill is behind) or no current day.
    Empty,
}
