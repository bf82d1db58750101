//! Tenant quotas: reserve an estimate, settle the real use, or release (design.md §4).
//!
//! Every operation is one script call on the tenant's keys (one hash tag, one slot),
//! idempotent per request id. When Redis cannot be reached, the tenant's fallback policy
//! applies (see [`FallbackPolicy`]); what was admitted meanwhile is kept in this process
//! ([`offline`]) and charged to Redis as soon as it answers again.
//!
//! Concurrent reserves (and settles) for one tenant are coalesced: while one call is in
//! flight, those that arrive go together in the next call (up to [`DEFAULT_COALESCE`]),
//! each decided in turn exactly as alone, on one read of the tenant's snapshot. An
//! operation the shared call could not decide (Redis away, the month turned) goes alone.
//!
//! Layout, one job a module: [`reserve`], [`settle`], [`release`], [`sweep`] (expired
//! reservations back), [`tenant`] (publish a tenant's snapshot, read its usage),
//! [`replay`] (charge the offline journal once Redis answers), [`chunks`] (hot tenants'
//! reserves served from a chunk of their tokens), [`call`] (one script call,
//! alone or shared, with the period retry and the breaker), [`usage`] (the usage stream
//! for the Postgres ledger, and counters restored from it); [`types`] holds the validated
//! names and amounts.

mod call;
mod chunks;
mod counters;
mod earlier;
mod journal;
mod offline;
mod release;
mod replay;
mod reserve;
mod settle;
mod sweep;
mod tenant;
mod types;
mod usage;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use redis::Value;
use serde::Serialize;

pub use self::chunks::{ChunkSettings, Returned as ChunksReturned, MAX_CHUNK_LEASE};
pub use self::counters::{Correction, Counters, MAX_TAIL};
pub use self::earlier::Earlier;
pub use self::journal::JournalDisk;
use self::offline::Offline;
pub use self::offline::{OfflineSummary, MAX_WAITING, MAX_WAITING_PER_TENANT};
pub use self::release::ReleaseOutcome;
pub use self::replay::WaitingOp;
pub use self::reserve::{Dimension, Refusal, Reservation, ReserveOutcome};
pub use self::settle::{Expired, SettleOutcome};
pub use self::sweep::SweepOutcome;
pub use self::tenant::{BucketUsage, OpenReservation, QuotaUsage};
pub use self::types::{
    exact_integer, FallbackPolicy, Grant, GrantId, GrantKind, InvalidInput, RequestId, TenantId, TenantQuota,
    TokenCount, Tokens, DEFAULT_IDEMPOTENCY_WINDOW, MAX_IDEMPOTENCY_WINDOW, MAX_RESERVATION_TTL,
    MIN_IDEMPOTENCY_WINDOW,
};
pub use self::usage::{Applied, Published, Restore, UsageOutcome, UsageRecord, MAX_UNCONFIRMED, USAGE_GROUP};
use crate::clock::Clock;
use crate::coalesce::Coalescer;
pub use crate::coalesce::DEFAULT_COALESCE;
use crate::connection::{Breaker, RedisHandle};
use crate::keys::Keys;
use crate::metrics::QuotaMetrics;
use crate::reply::{Fields, ReplyError};

/// Why a quota operation failed (a refusal is not a failure: see [`ReserveOutcome`]).
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// No snapshot has been published for this tenant.
    #[error("unknown tenant {0:?}")]
    UnknownTenant(TenantId),
    /// Redis cannot be reached and the tenant's policy is to refuse (or the operation
    /// cannot be decided without Redis).
    #[error("quota store unavailable for tenant {tenant:?} (policy {policy}): {source}")]
    Unavailable { tenant: TenantId, policy: &'static str, source: redis::RedisError },
    /// Redis cannot be reached and the operation could not be kept for it: the journal's
    /// write failed, the tenant has as many operations waiting as it may, or this process
    /// does not know the tenant. Nothing was admitted or recorded.
    #[error("quota store unavailable for tenant {tenant:?} and the operation could not be recorded: {reason}")]
    NotRecorded { tenant: TenantId, reason: String },
    /// Redis answered with an error.
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    /// A script answered something this client does not understand (a version mismatch).
    #[error("unexpected reply from {script}: {detail}")]
    Protocol { script: &'static str, detail: String },
}

/// Where a decision was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(as = QuotaSource))]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// By the script in Redis: exact, shared by every client.
    Redis,
    /// In this process while Redis was unreachable, under a `fail_open_limited` policy.
    Fallback,
    /// From the usage ledger in Postgres: a repeated call after the tenant's idempotency
    /// window, when Redis no longer holds the request's done marker.
    Ledger,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Fallback => "fallback",
            Self::Ledger => "ledger",
        }
    }
}

/// One bucket's share of a reservation or a charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Part {
    /// `plan` or a grant id.
    pub bucket: String,
    pub tokens: u64,
}

/// Where a reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    Open,
    Settled,
    Released,
    /// Returned by the sweeper after its deadline.
    Expired,
}

/// A tenant's fallback policy as of the snapshot version this client last saw.
#[derive(Debug, Clone, Copy)]
struct KnownPolicy {
    version: u64,
    policy: FallbackPolicy,
}

struct Inner {
    redis: RedisHandle,
    keys: Keys,
    clock: Clock,
    metrics: Option<QuotaMetrics>,
    policies: Mutex<HashMap<TenantId, KnownPolicy>>,
    offline: Mutex<Offline>,
    has_offline: AtomicBool,
    flushing: AtomicBool,
    redis_down: AtomicBool,
    breaker: Breaker,
    /// Concurrent operations of one script (`reserve_quota`, `settle_quota`) for one
    /// tenant sharing a call: each one's arguments in, its own reply out.
    coalescer: Coalescer<(&'static str, TenantId), Vec<String>, Vec<Value>>,
    /// Settle records this process made, until the usage ledger holds them.
    unconfirmed: Mutex<usage::Unconfirmed>,
    /// Tenants whose usage stream has the ledger's consumer group (made once per process).
    usage_groups: Mutex<HashSet<TenantId>>,
    /// Known tenants whose snapshot Redis does not hold (it lost it), for the control
    /// plane to republish at once ([`Quotas::missing_meta`]).
    missing: Mutex<HashSet<TenantId>>,
    missing_notify: tokio::sync::Notify,
    /// Hot tenants' chunks ([`chunks`]).
    chunks: Mutex<chunks::Chunks>,
}

/// The quota client: cheap to clone, shared by every task of a process.
#[derive(Clone)]
pub struct Quotas {
    inner: Arc<Inner>,
}

impl Quotas {
    /// A client over `redis` with key names from `keys`, on the Redis clock.
    pub fn new(redis: RedisHandle, keys: Keys) -> Self {
        Self::with_clock(redis, keys, Clock::Redis, None)
    }

    /// A client with an explicit clock and, optionally, metrics to record into.
    pub fn with_clock(redis: RedisHandle, keys: Keys, clock: Clock, metrics: Option<QuotaMetrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                redis,
                keys,
                clock,
                metrics,
                policies: Mutex::new(HashMap::new()),
                offline: Mutex::new(Offline::default()),
                has_offline: AtomicBool::new(false),
                flushing: AtomicBool::new(false),
                redis_down: AtomicBool::new(false),
                breaker: Breaker::default(),
                coalescer: Coalescer::new(),
                unconfirmed: Mutex::new(usage::Unconfirmed::default()),
                usage_groups: Mutex::new(HashSet::new()),
                missing: Mutex::new(HashSet::new()),
                missing_notify: tokio::sync::Notify::new(),
                chunks: Mutex::new(chunks::Chunks::default()),
            }),
        }
    }

    /// Sets how many concurrent reserves (or settles) for one tenant may share a script
    /// call (at least 1; 1: every operation makes its own call).
    pub fn set_coalescing(&self, max: usize) {
        self.inner.coalescer.set_max(max);
    }

    /// How many tenants have a coalescing queue now (those with operations waiting or in
    /// flight).
    pub fn coalescing_queues(&self) -> usize {
        self.inner.coalescer.keys()
    }

    /// The key names this client uses.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Remembers a tenant's fallback policy as of `version` (the control plane's last
    /// published snapshot, read from Postgres at start) unless this client knows a newer
    /// one: the policy applies from the first request, and while Redis lacks the tenant.
    pub fn remember(&self, tenant: &TenantId, version: u64, policy: FallbackPolicy) {
        let mut policies = self.inner.policies.lock().expect("policy lock");
        if policies.get(tenant).is_none_or(|k| k.version < version) {
            policies.insert(tenant.clone(), KnownPolicy { version, policy });
        }
    }

    /// Whether this client knows `tenant` (from a reply of Redis or [`Quotas::remember`]).
    pub(crate) fn knows(&self, tenant: &TenantId) -> bool {
        self.inner.policies.lock().expect("policy lock").contains_key(tenant)
    }

    /// Waits until a call finds a known tenant missing from Redis, then returns every such
    /// tenant (each reported once until it goes missing again).
    pub async fn missing_meta(&self) -> Vec<TenantId> {
        loop {
            let notified = self.inner.missing_notify.notified();
            let found: Vec<TenantId> = self.inner.missing.lock().expect("missing lock").drain().collect();
            if !found.is_empty() {
                return found;
            }
            notified.await;
        }
    }

    fn note_missing(&self, tenant: &TenantId) {
        if self.inner.missing.lock().expect("missing lock").insert(tenant.clone()) {
            tracing::warn!(tenant = %tenant, "redis lost this tenant's snapshot: its fallback policy applies until it is republished");
        }
        self.inner.missing_notify.notify_waiters();
    }
}

impl Quotas {
    /// Waits until the journal lines of an operation made without Redis are on disk; when
    /// one could not be written, takes `change` back and answers that nothing was recorded.
    /// Until then a retry of the request id is answered [`offline::NotNow::Writing`]. The
    /// wait runs in a task of its own: a caller that goes away midway (a client that timed
    /// out, about to retry) neither ends the wait early nor leaves a failed change in place.
    async fn recorded(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        acks: journal::Acks,
        change: Option<offline::Change>,
    ) -> Result<(), QuotaError> {
        if acks.is_empty() {
            return Ok(());
        }
        let (inner, lines) = (self.inner.clone(), acks.len());
        let (t, r) = (tenant.clone(), request.clone());
        let settled = tokio::spawn(async move {
            let result = journal::synced(acks).await;
            let mut journal = inner.offline.lock().expect("offline journal lock");
            if let (Err(_), Some(change)) = (&result, change) {
                journal.take_back(&t, &r, change);
                if let Some(m) = &inner.metrics {
                    m.offline_pending.set(journal.len() as i64);
                }
            }
            journal.written(&t, &r, lines);
            result
        });
        let result =
            settled.await.unwrap_or_else(|e| Err(std::io::Error::other(format!("the journal wait failed: {e}"))));
        let Err(e) = result else { return Ok(()) };
        if let Some(m) = &self.inner.metrics {
            m.fallback.with_label_values(&["any", "not_recorded"]).inc();
        }
        Err(QuotaError::NotRecorded {
            tenant: tenant.clone(),
            reason: format!("writing the quota journal failed: {e}"),
        })
    }

    /// What an operation made without Redis answers when it cannot be kept now.
    fn no_room(&self, tenant: &TenantId, why: offline::NotNow) -> QuotaError {
        if let Some(m) = &self.inner.metrics {
            m.fallback.with_label_values(&["any", "not_recorded"]).inc();
        }
        let reason = match why {
            offline::NotNow::Full => format!(
                "{MAX_WAITING_PER_TENANT} operations of this tenant (or {MAX_WAITING} in all) are waiting for redis already"
            ),
            offline::NotNow::Writing => {
                "an earlier attempt of this request id is still being written to the quota journal: retry".to_owned()
            }
        };
        QuotaError::NotRecorded { tenant: tenant.clone(), reason }
    }
}

impl From<ReplyError> for QuotaError {
    fn from(e: ReplyError) -> Self {
        Self::Protocol { script: e.script, detail: e.detail }
    }
}

/// A fresh id of 16 hex digits (a counters' generation, a chunk holder's name): the time
/// and this process's randomness, unique in practice.
fn unique_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{:016x}", h.finish())
}

/// `bucket:amount,bucket:amount` (empty: none).
fn parts(f: &Fields<'_>, i: usize) -> Result<Vec<Part>, ReplyError> {
    f.str(i)?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|part| {
            let (bucket, tokens) = part.split_once(':').ok_or_else(|| f.bad(i, "part without ':'"))?;
            let tokens = tokens.parse().map_err(|_| f.bad(i, "part amount not an integer"))?;
            Ok(Part { bucket: bucket.to_owned(), tokens })
        })
        .collect()
}

fn state(f: &Fields<'_>, i: usize) -> Result<ReservationState, ReplyError> {
    Ok(match f.str(i)? {
        "open" => ReservationState::Open,
        "settled" => ReservationState::Settled,
        "released" => ReservationState::Released,
        "expired" => ReservationState::Expired,
        other => return Err(f.unexpected(other)),
    })
}
