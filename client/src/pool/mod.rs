//! Ticket pools: draw the next ticket in one script call, with a degradation chain when
//! Redis cannot be reached (design.md §3).
//!
//! [`Pools::draw`] pops from the pool's list in Redis. When Redis is unreachable (or has no
//! ticket to give), the draw is served by a local in-process pool built with the engine from
//! the last snapshot this client saw, and failing that by plain weighted random over the
//! static weights the application configured. Each draw says which level served it; each
//! change of level is logged once and every draw is counted by source. The client goes
//! back to Redis by itself on the next draw that gets an answer.
//!
//! Concurrent draws of one pool are coalesced: while a script call is in flight, the
//! draws that arrive wait and then go together in the next call (up to
//! [`DEFAULT_COALESCE`]), each drawn in turn exactly as a single draw would be. Up to
//! [`DEFAULT_DRAW_LANES`] calls of one pool are in flight at once (each atomic in Redis),
//! so Redis is not left idle while a reply travels back. Under load this turns many round
//! trips into a few; alone, a draw is one call as before. A draw the
//! shared call could not serve (the pool ran empty, a refusal, Redis away) takes the
//! single-draw path with its degradation chain.
//!
//! With ticket leases on ([`Pools::set_ticket_leases`]), a shared call also takes tickets
//! ahead for this instance, served from memory in order for a short hold (see [`lease`]).
//!
//! Layout: [`script`] draws in Redis (alone or shared), [`lease`] the tickets taken ahead,
//! [`fallback`] serves the levels below it, [`sticky`] draws by key; [`admin`] holds the control plane's side: publish,
//! rotate, refill, eject, and [`readout`] what a pool holds for the sampler.

pub mod admin;
pub mod draw_log;
mod fallback;
mod lease;
mod peak;
pub mod readout;
mod script;
mod sticky;
mod types;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use engine::hashing::HashRing;
use engine::selector::AliasTable;
use engine::Weights;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

pub use self::admin::{Days, EjectOutcome, PoolAdmin, RefillOutcome, ReweightMode};
use self::fallback::LocalPool;
pub use self::lease::LeaseSettings;
pub use self::readout::{ListLength, ReadOut};
pub use self::types::{PoolKind, PoolName, PoolSnapshot, MAX_BATCH};
use crate::clock::Clock;
use crate::coalesce::Coalescer;
pub use crate::coalesce::DEFAULT_COALESCE;

/// How many shared draw calls of one pool may be in flight at once unless set: with one,
/// the client waits for a call's reply before it sends the next, and Redis idles meanwhile.
pub const DEFAULT_DRAW_LANES: usize = 2;
use crate::connection::{Breaker, RedisHandle};
use crate::keys::Keys;
use crate::metrics::PoolMetrics;
use crate::quota::InvalidInput;
use crate::reply::ReplyError;

pub(crate) mod reply {
    pub(crate) use crate::reply::Fields;
}

/// The most tickets one draw skips (ejected or capped members) before it answers
/// `exhausted` instead of looping.
pub const MAX_SKIPS: u32 = 64;

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

#[derive(Default)]
struct Cached {
    snapshot: Option<PoolSnapshot>,
    ejected: HashSet<String>,
    days: Option<(String, String)>,
    /// The short cap window's length (ms) the draw script last named, for a pool with
    /// window caps: the window keys a call passes are computed from it.
    window_ms: Option<i64>,
    local: Option<LocalPool>,
    ring: Option<(u64, Arc<HashRing>)>,
    level: Option<DrawSource>,
    /// The draw counters of this pool's members by source, looked up once each (a
    /// labelled counter's lookup hashes its three labels under a lock).
    counters: Vec<(String, DrawSource, prometheus::IntCounter)>,
    /// The draw script's keys and arguments for the days and cap windows last seen.
    draw_keys: Option<Arc<script::DrawKeys>>,
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
    /// Concurrent draws of one pool sharing a script call.
    coalescer: Coalescer<PoolName, (), Result<Draw, PoolError>>,
    /// How many shared calls of one pool may be in flight at once (see [`DEFAULT_DRAW_LANES`]).
    draw_lanes: std::sync::atomic::AtomicUsize,
    /// Pools this client knows whose meta hash Redis does not hold (it lost it): for the
    /// control plane to republish at once ([`Pools::missing_meta`]).
    missing: Mutex<HashSet<PoolName>>,
    missing_notify: tokio::sync::Notify,
    /// Ticket leases: off (`None`) unless turned on.
    lease_settings: Mutex<Option<LeaseSettings>>,
    /// Whether leases are on now (the shared calls' `lease_extra` reads no lock when not).
    leases_on: std::sync::atomic::AtomicBool,
    /// Tickets held in every lease now, kept under the leases lock: a draw reads no lock
    /// when there are none (leases off, or served out and returned).
    tickets_held: std::sync::atomic::AtomicUsize,
    leases: Mutex<HashMap<PoolName, lease::Lease>>,
    lease_ids: AtomicU64,
    /// Draws served from leases.
    leased: AtomicU64,
    /// Returns of leased tickets under way.
    returning: std::sync::atomic::AtomicUsize,
    /// The runtime the client was made on: lease timers run there, not on a runtime that
    /// may stop first (an HTTP worker's).
    runtime: Option<tokio::runtime::Handle>,
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
                coalescer: Coalescer::new(),
                draw_lanes: std::sync::atomic::AtomicUsize::new(DEFAULT_DRAW_LANES),
                missing: Mutex::new(HashSet::new()),
                missing_notify: tokio::sync::Notify::new(),
                lease_settings: Mutex::new(None),
                leases_on: Default::default(),
                tickets_held: Default::default(),
                leases: Mutex::new(HashMap::new()),
                lease_ids: AtomicU64::new(0),
                leased: AtomicU64::new(0),
                returning: Default::default(),
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    /// Sets how many concurrent draws of one pool may share a script call (at least 1;
    /// 1: every draw makes its own call).
    pub fn set_coalescing(&self, max: usize) {
        self.inner.coalescer.set_max(max);
    }

    /// Sets how many shared calls of one pool may be in flight at once (at least 1). With
    /// ticket leases on, one: a lease is taken by one call at a time.
    pub fn set_draw_lanes(&self, lanes: usize) {
        self.inner.draw_lanes.store(lanes.max(1), AtomicOrdering::Relaxed);
    }

    /// How many pools this client keeps a cache entry for (for tests: names sent from
    /// outside add none).
    #[doc(hidden)]
    pub fn cached_pools(&self) -> usize {
        self.inner.cache.lock().expect("pool cache lock").len()
    }

    /// How many pools have a coalescing queue now (those with draws waiting or in flight).
    pub fn coalescing_queues(&self) -> usize {
        self.inner.coalescer.keys()
    }

    /// Shared draw calls made since the client was made (draws per call: coalesced draws
    /// over this).
    pub fn shared_calls(&self) -> u64 {
        self.inner.coalescer.calls()
    }

    /// Remembers a pool's snapshot (the control plane's last published one, read from
    /// Postgres at start) unless this client has seen one as new or newer, so the local
    /// pool serves draws before any successful Redis call and while Redis lacks the pool.
    pub fn remember(&self, pool: &PoolName, snapshot: PoolSnapshot) {
        let mut cache = self.inner.cache.lock().expect("pool cache lock");
        let entry = cache.entry(pool.clone()).or_default();
        if entry.snapshot.as_ref().is_none_or(|s| s.version < snapshot.version) {
            entry.snapshot = Some(snapshot);
            entry.local = None;
            entry.ring = None;
        }
    }

    /// Waits until a draw finds a known pool missing from Redis, then returns every such
    /// pool (each reported once until it goes missing again).
    pub async fn missing_meta(&self) -> Vec<PoolName> {
        loop {
            let notified = self.inner.missing_notify.notified();
            let found: Vec<PoolName> = self.inner.missing.lock().expect("missing lock").drain().collect();
            if !found.is_empty() {
                return found;
            }
            notified.await;
        }
    }

    /// Whether this client knows a snapshot of `pool`.
    fn knows(&self, pool: &PoolName) -> bool {
        self.inner.cache.lock().expect("pool cache lock").get(pool).is_some_and(|c| c.snapshot.is_some())
    }

    fn note_missing(&self, pool: &PoolName) {
        if self.inner.missing.lock().expect("missing lock").insert(pool.clone()) {
            tracing::warn!(pool = %pool, "redis lost this pool's meta hash: served locally until it is republished");
        }
        self.inner.missing_notify.notify_waiters();
    }

    /// Draws the next ticket of `pool`.
    #[tracing::instrument(level = "debug", skip_all, fields(pool = %pool))]
    pub async fn draw(&self, pool: &PoolName) -> Result<Draw, PoolError> {
        let drawn = self.draw_once(pool).await;
        if let (Err(e), Some(m)) = (&drawn, &self.inner.metrics) {
            let reason = match e {
                PoolError::Exhausted { .. } => Some("exhausted"),
                PoolError::Unavailable { .. } => Some("unavailable"),
                _ => None,
            };
            if let Some(reason) = reason {
                // Names sent from outside add no series.
                let known = self.knows(pool) || self.inner.statics.contains_key(pool);
                m.refused.with_label_values(&[if known { pool.as_str() } else { "(unknown)" }, reason]).inc();
            }
        }
        drawn
    }

    async fn draw_once(&self, pool: &PoolName) -> Result<Draw, PoolError> {
        self.inner.draws.fetch_add(1, AtomicOrdering::Relaxed);
        match self.next_leased(pool) {
            lease::Leased::Ticket(draw) => return Ok(self.served(draw)),
            // Back to the list before this draw takes the tickets after them.
            lease::Leased::Expired(unserved) => self.give_back(unserved).await,
            lease::Leased::Nothing => {}
        }
        if self.inner.breaker.is_open() {
            return self.degrade(pool, Degrade::Unreachable(Breaker::skipped_error()));
        }
        // A pool this client has no snapshot of goes alone: names sent from outside make
        // no queue (its first draw reads the snapshot of a pool that exists).
        if self.inner.coalescer.is_on() && self.knows(pool) {
            if let Some(drawn) = self.coalesced(pool).await {
                self.inner.breaker.reset();
                return drawn.map(|draw| self.served(draw));
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
            match entry.counters.iter().find(|(member, source, _)| *source == draw.source && *member == draw.member) {
                Some((_, _, counter)) => counter.inc(),
                None => {
                    let counter = m.draws.with_label_values(&[draw.pool.as_str(), &draw.member, draw.source.name()]);
                    counter.inc();
                    entry.counters.push((draw.member.clone(), draw.source, counter));
                }
            }
        }
        draw
    }

    /// The starts (ms, as text) of the two short cap windows a call passes keys for: the
    /// one this client's clock is in and the next, or the one before when the clock is in
    /// the first 5 s of its window (Redis's clock may be a little behind). `-` for both
    /// while the window's length is not known (the script then names it).
    pub(super) fn window_args(&self, pool: &PoolName) -> (String, String) {
        let len = self.inner.cache.lock().expect("pool cache lock").get(pool).and_then(|c| c.window_ms);
        window_text(self.window_starts(len))
    }

    /// The starts (ms) of the two cap windows a call passes for a short window of `len` ms:
    /// the current one and the next, or the one before within 5 s of a window's start.
    pub(super) fn window_starts(&self, len: Option<i64>) -> Option<(i64, i64)> {
        let len = len.filter(|l| *l > 0)?;
        let now = self.inner.clock.guess().timestamp_millis();
        let start = now - now.rem_euclid(len);
        Some(if now - start < 5_000 { (start - len, start) } else { (start, start + len) })
    }

    /// Remembers the window length a `{"window", start, length}` reply named.
    pub(super) fn note_window(&self, pool: &PoolName, length: i64) {
        self.inner.cache.lock().expect("pool cache lock").entry(pool.clone()).or_default().window_ms = Some(length);
    }

    /// Waits for this draw's turn in the pool's next shared call; `None` when that call
    /// could not serve it (the caller then draws alone); `Exhausted` when the call ended on
    /// nothing drawable (drawing alone would skip tickets again, or find the list empty and
    /// serve locally past the caps).
    async fn coalesced(&self, pool: &PoolName) -> Option<Result<Draw, PoolError>> {
        let this = self.clone();
        let flush = move |pool: PoolName, draws: Vec<()>| {
            let this = this.clone();
            async move {
                // With leases on, the call takes tickets ahead too: kept as this pool's lease.
                let wanted = draws.len();
                let (mut got, counted, exhausted) =
                    this.draw_redis_shared(&pool, wanted + this.lease_extra(&pool)).await;
                if got.len() > wanted {
                    let ahead = got.split_off(wanted);
                    match counted {
                        Some(counted) => this.keep_lease(&pool, counted, ahead).await,
                        None => tracing::error!(pool = %pool, "tickets taken ahead without their day: lost"),
                    }
                }
                let mut answers: Vec<Option<Result<Draw, PoolError>>> = got.into_iter().map(|d| Some(Ok(d))).collect();
                if let Some(e) = exhausted {
                    answers.resize_with(wanted.max(answers.len()), || {
                        Some(Err(PoolError::Exhausted {
                            pool: pool.clone(),
                            skipped_ejected: e.skipped_ejected,
                            skipped_capped: e.skipped_capped,
                        }))
                    });
                }
                answers
            }
        };
        let lanes = if self.leases_on() { 1 } else { self.inner.draw_lanes.load(AtomicOrdering::Relaxed) };
        self.inner.coalescer.submit(pool, lanes, (), flush).await
    }
}

/// Why a draw left Redis.
enum Degrade {
    Unreachable(redis::RedisError),
    /// Redis answered but had no ticket (the refill is behind) or no current day.
    Empty,
    /// Redis does not hold the pool's meta hash, but this client knows the pool.
    Missing,
}

/// The two cap windows' starts as the scripts take them: `-` for none.
pub(super) fn window_text(windows: Option<(i64, i64)>) -> (String, String) {
    match windows {
        Some((w0, w1)) => (w0.to_string(), w1.to_string()),
        None => ("-".to_owned(), "-".to_owned()),
    }
}
