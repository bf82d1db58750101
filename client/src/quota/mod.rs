//! Tenant quotas: reserve an estimate, settle the real use, or release (DESIGN §4).
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

mod offline;
mod types;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use redis::{Script, Value};
use serde::Serialize;

use self::offline::Offline;
pub use self::offline::OfflineSummary;
pub use self::types::{
    FallbackPolicy, Grant, GrantId, GrantKind, InvalidInput, RequestId, TenantId, TenantQuota, TokenCount, Tokens,
    MAX_RESERVATION_TTL,
};
use crate::clock::{Clock, Period};
use crate::connection::{is_unreachable, Breaker, RedisHandle};
use crate::keys::Keys;
use crate::metrics::QuotaMetrics;
use crate::reply::{Fields, ReplyError};
use crate::scripts;

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
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Fallback => "fallback",
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

/// An admitted reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Reservation {
    pub tokens: u64,
    /// When the sweeper may return it (ms since the epoch, by the Redis clock); 0 for a
    /// fallback admission.
    pub deadline_ms: i64,
    /// The buckets holding it, in paying order.
    pub parts: Vec<Part>,
    /// True when this request id had reserved before: nothing more was reserved.
    pub replayed: bool,
    pub state: ReservationState,
    pub source: Source,
}

/// The limit a refused reservation ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Tokens,
    Requests,
    Concurrency,
    /// The local allowance of a `fail_open_limited` tenant while Redis is unreachable.
    FallbackAllowance,
}

impl Dimension {
    /// The name in replies and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Requests => "requests",
            Self::Concurrency => "concurrency",
            Self::FallbackAllowance => "fallback_allowance",
        }
    }
}

/// A refusal: which dimension ran out, what is left of it, and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub dimension: Dimension,
    pub available: u64,
    pub limit: u64,
}

/// What `reserve` decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ReserveOutcome {
    Reserved(Reservation),
    Refused(Refusal),
}

/// What `settle` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum SettleOutcome {
    /// The actual use was charged and the rest of the reservation refunded. `overdraft`:
    /// use beyond the reservation; `late`: the reservation had expired and was swept.
    Settled { reserved: u64, actual: u64, overdraft: u64, charged: Vec<Part>, late: bool, source: Source },
    /// This request id was settled before; nothing changed.
    AlreadySettled { reserved: u64, actual: u64, charged: Vec<Part> },
    /// This request id was released before; nothing changed.
    AlreadyReleased { reserved: u64 },
    /// Redis is unreachable: the settle is kept and applied when it answers.
    Queued,
    /// No reservation with this request id.
    Unknown,
}

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ReleaseOutcome {
    Released {
        reserved: u64,
        source: Source,
    },
    AlreadyReleased {
        reserved: u64,
    },
    AlreadySettled {
        reserved: u64,
        actual: u64,
        charged: Vec<Part>,
    },
    /// Redis is unreachable: the release is kept and applied when it answers.
    Queued,
    Unknown,
}

/// What one sweep of a tenant returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SweepOutcome {
    pub released: u64,
    pub tokens: u64,
    /// Expired reservations beyond the sweep's limit, left for the next call.
    pub left: u64,
    /// Reservations still open after the sweep.
    pub open: u64,
}

/// One bucket of a tenant's quota as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct BucketUsage {
    pub id: String,
    /// `plan`, `temporary` or `bonus`.
    pub kind: String,
    pub priority: u32,
    pub amount: u64,
    pub used: u64,
    pub reserved: u64,
    /// Live now (started and not expired); the plan is always live.
    pub live: bool,
    pub expires_at_ms: Option<i64>,
}

/// A tenant's quota as it stands now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct QuotaUsage {
    pub version: u64,
    pub period: String,
    pub day: String,
    pub requests_today: u64,
    pub daily_requests: u64,
    pub leases: u64,
    pub concurrency: u64,
    /// Tokens a reservation could take now.
    pub available: u64,
    /// In paying order, the plan last.
    pub buckets: Vec<BucketUsage>,
}

#[derive(Debug, Clone, Copy)]
struct KnownPolicy {
    version: u64,
    policy: FallbackPolicy,
}

/// The most concurrent operations of one kind for one tenant that share a script call.
pub const DEFAULT_COALESCE: usize = 64;

/// A reply for one coalesced operation (`None`: go alone).
type Slot = tokio::sync::oneshot::Sender<Option<Vec<Value>>>;

/// The operations of one kind for one tenant waiting for the next shared call.
#[derive(Default)]
struct Waiting {
    ops: Vec<(Vec<String>, Slot)>,
    running: bool,
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
    coalesce: AtomicUsize,
    waiting: Mutex<HashMap<(&'static str, TenantId), Waiting>>,
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
                coalesce: AtomicUsize::new(DEFAULT_COALESCE),
                waiting: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sets how many concurrent reserves (or settles) for one tenant may share a script
    /// call (at least 1; 1: every operation makes its own call).
    pub fn set_coalescing(&self, max: usize) {
        self.inner.coalesce.store(max.max(1), Ordering::Relaxed);
    }

    /// The key names this client uses.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Installs a tenant's snapshot unless Redis holds one as new or newer. Returns whether
    /// it was written and the version Redis now holds.
    #[tracing::instrument(skip_all, fields(tenant = %tenant, version = quota.version), err)]
    pub async fn publish(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<(bool, u64), QuotaError> {
        if let Err(invalid) = quota.validate() {
            return Err(QuotaError::Protocol { script: "publish_snapshot", detail: invalid.to_string() });
        }
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let mut call = scripts::quota().publish_meta.key(self.inner.keys.quota_meta(tenant.as_str()));
        call.arg(quota.version);
        for (field, value) in quota.meta_fields() {
            call.arg(field).arg(value);
        }
        let reply: (i64, u64) = call.invoke_async(&mut conn).await.map_err(QuotaError::Redis)?;
        Ok((reply.0 == 1, reply.1))
    }

    /// Removes a tenant's published snapshot (the tenant is then unknown to the data plane).
    pub async fn unpublish(&self, tenant: &TenantId) -> Result<(), QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        redis::cmd("UNLINK")
            .arg(self.inner.keys.quota_meta(tenant.as_str()))
            .query_async::<()>(&mut conn)
            .await
            .map_err(QuotaError::Redis)
    }

    /// Admits `tokens` for one request — with its daily request count and a concurrency
    /// lease — or refuses, saying which dimension ran out. Retrying with the same request
    /// id returns the first result and reserves nothing more.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request), err)]
    pub async fn reserve(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
    ) -> Result<ReserveOutcome, QuotaError> {
        let extra = vec![request.as_str().to_owned(), tokens.get().to_string(), "0".to_owned()];
        let reply = match self.coalesced("reserve_quota", tenant, &extra).await {
            Some(reply) => reply,
            None => match self.call("reserve_quota", &scripts::quota().reserve, tenant, &extra).await {
                Ok(reply) => reply,
                Err(CallError::Unreachable(error)) => return self.reserve_offline(tenant, request, tokens, error),
                Err(other) => return Err(other.into_quota_error()),
            },
        };
        let f = Fields::new("reserve_quota", &reply);
        let outcome = match f.str(0)? {
            "reserved" => ReserveOutcome::Reserved(Reservation {
                tokens: f.uint(2)?,
                deadline_ms: f.int(3)?,
                parts: parts(&f, 4)?,
                replayed: f.int(5)? == 1,
                state: state(&f, 6)?,
                source: Source::Redis,
            }),
            "refused" => ReserveOutcome::Refused(Refusal {
                dimension: match f.str(2)? {
                    "tokens" => Dimension::Tokens,
                    "requests" => Dimension::Requests,
                    "concurrency" => Dimension::Concurrency,
                    other => return Err(f.unexpected(other).into()),
                },
                available: f.uint(3)?,
                limit: f.uint(4)?,
            }),
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        };
        self.note_version(tenant, f.uint(1)?).await;
        if let Some(m) = &self.inner.metrics {
            match &outcome {
                ReserveOutcome::Reserved(r) if !r.replayed => {
                    m.reserves.with_label_values(&["admitted", "none", "redis"]).inc()
                }
                ReserveOutcome::Refused(r) => {
                    m.reserves.with_label_values(&["refused", r.dimension.name(), "redis"]).inc()
                }
                _ => {}
            }
        }
        Ok(outcome)
    }

    /// Closes a reservation with the tokens actually used (`partial`: the stream broke and
    /// `actual` is what was consumed before it did). A repeated settle changes nothing.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request, actual = actual.get(), partial), err)]
    pub async fn settle(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
    ) -> Result<SettleOutcome, QuotaError> {
        if self.inner.offline.lock().expect("offline journal lock").holds_admission(tenant, request) {
            // Admitted without Redis and not replayed yet: the journal closes it.
            let mut journal = self.inner.offline.lock().expect("offline journal lock");
            return Ok(journal.settle(tenant, request, actual, partial));
        }
        let extra =
            vec![request.as_str().to_owned(), actual.get().to_string(), if partial { "1" } else { "0" }.to_owned()];
        let reply = match self.coalesced("settle_quota", tenant, &extra).await {
            Some(reply) => reply,
            None => match self.call("settle_quota", &scripts::quota().settle, tenant, &extra).await {
                Ok(reply) => reply,
                Err(CallError::Unreachable(error)) => {
                    return Ok(self.settle_offline(tenant, request, actual, partial, error))
                }
                Err(other) => return Err(other.into_quota_error()),
            },
        };
        let f = Fields::new("settle_quota", &reply);
        let outcome = match f.str(0)? {
            "settled" => SettleOutcome::Settled {
                reserved: f.uint(2)?,
                actual: f.uint(3)?,
                overdraft: f.uint(4)?,
                charged: parts(&f, 5)?,
                late: f.int(6)? == 1,
                source: Source::Redis,
            },
            "already_settled" => {
                SettleOutcome::AlreadySettled { reserved: f.uint(2)?, actual: f.uint(3)?, charged: parts(&f, 4)? }
            }
            "already_released" => SettleOutcome::AlreadyReleased { reserved: f.uint(2)? },
            "unknown" => SettleOutcome::Unknown,
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        };
        if let (Some(m), SettleOutcome::Settled { reserved, actual, .. }) = (&self.inner.metrics, &outcome) {
            m.settle_delta.observe(*reserved as f64 - *actual as f64);
        }
        Ok(outcome)
    }

    /// Cancels a reservation, refunding all of it. A repeated release changes nothing.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request), err)]
    pub async fn release(&self, tenant: &TenantId, request: &RequestId) -> Result<ReleaseOutcome, QuotaError> {
        if self.inner.offline.lock().expect("offline journal lock").holds_admission(tenant, request) {
            let mut journal = self.inner.offline.lock().expect("offline journal lock");
            return Ok(journal.release(tenant, request));
        }
        let extra = [request.as_str().to_owned()];
        let reply = match self.call("release_quota", &scripts::quota().release, tenant, &extra).await {
            Ok(reply) => reply,
            Err(CallError::Unreachable(error)) => return Ok(self.release_offline(tenant, request, error)),
            Err(other) => return Err(other.into_quota_error()),
        };
        let f = Fields::new("release_quota", &reply);
        Ok(match f.str(0)? {
            "released" => ReleaseOutcome::Released { reserved: f.uint(2)?, source: Source::Redis },
            "already_released" => ReleaseOutcome::AlreadyReleased { reserved: f.uint(2)? },
            "already_settled" => {
                ReleaseOutcome::AlreadySettled { reserved: f.uint(2)?, actual: f.uint(3)?, charged: parts(&f, 4)? }
            }
            "unknown" => ReleaseOutcome::Unknown,
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        })
    }

    /// Returns up to `limit` of a tenant's reservations whose deadline has passed.
    #[tracing::instrument(skip_all, fields(tenant = %tenant), err)]
    pub async fn sweep(&self, tenant: &TenantId, limit: u32) -> Result<SweepOutcome, QuotaError> {
        let reply = self
            .call("sweep_quota", &scripts::quota().sweep, tenant, &[limit.max(1).to_string()])
            .await
            .map_err(CallError::into_quota_error)?;
        let f = Fields::new("sweep_quota", &reply);
        Ok(SweepOutcome { released: f.uint(0)?, tokens: f.uint(1)?, left: f.uint(2)?, open: f.uint(3)? })
    }

    /// A tenant's quota as it stands now.
    pub async fn usage(&self, tenant: &TenantId) -> Result<QuotaUsage, QuotaError> {
        let reply =
            self.call("read_quota", &scripts::quota().read, tenant, &[]).await.map_err(CallError::into_quota_error)?;
        let f = Fields::new("read_quota", &reply);
        match f.str(0)? {
            "quota" => {}
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        }
        let mut buckets = Vec::new();
        for row in f.array(9)? {
            let r = Fields::new("read_quota", row);
            let expires = r.int(7)?;
            buckets.push(BucketUsage {
                id: r.str(0)?.to_owned(),
                kind: r.str(1)?.to_owned(),
                priority: r.uint(2)? as u32,
                amount: r.uint(3)?,
                used: r.uint(4)?,
                reserved: r.uint(5)?,
                live: r.int(6)? == 1,
                expires_at_ms: (expires >= 0).then_some(expires),
            });
        }
        Ok(QuotaUsage {
            version: f.uint(1)?,
            period: f.str(2)?.to_owned(),
            day: f.str(3)?.to_owned(),
            requests_today: f.uint(4)?,
            daily_requests: f.uint(5)?,
            leases: f.uint(6)?,
            concurrency: f.uint(7)?,
            available: f.uint(8)?,
            buckets,
        })
    }

    /// Every tenant with open reservations under this prefix (a `SCAN`, for the sweeper).
    pub async fn tenants_with_leases(&self) -> Result<Vec<TenantId>, QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let pattern = self.inner.keys.quota_leases_pattern();
        let mut cursor: u64 = 0;
        let mut tenants = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await
                .map_err(QuotaError::Redis)?;
            for key in batch {
                if let Some(tenant) = self.inner.keys.tenant_of_quota_key(&key).and_then(|t| TenantId::parse(t).ok()) {
                    tenants.push(tenant);
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        tenants.sort();
        tenants.dedup();
        Ok(tenants)
    }

    /// What this process admitted or queued while Redis was away and has not yet charged.
    pub fn offline_summary(&self) -> OfflineSummary {
        self.inner.offline.lock().expect("offline journal lock").summary()
    }

    /// Charges to Redis everything admitted or queued while it was away. Runs by itself
    /// before the next operation once Redis answers; callers may also run it on a timer.
    pub async fn flush_offline(&self) -> Result<usize, QuotaError> {
        if !self.inner.has_offline.load(Ordering::Acquire) {
            return Ok(0);
        }
        // One flush at a time; other callers go on with their own operation meanwhile.
        if self.inner.flushing.swap(true, Ordering::AcqRel) {
            return Ok(0);
        }
        let result = self.flush_journal().await;
        self.inner.flushing.store(false, Ordering::Release);
        result
    }

    async fn flush_journal(&self) -> Result<usize, QuotaError> {
        let work = self.inner.offline.lock().expect("offline journal lock").snapshot();
        let mut done = 0;
        for (tenant, op) in work {
            let applied = match &op {
                offline::Op::Admit { request, tokens, close } => {
                    let extra = [request.as_str().to_owned(), tokens.get().to_string(), "1".to_owned()];
                    self.call_direct("reserve_quota", &scripts::quota().reserve, &tenant, &extra).await?;
                    match close {
                        Some(offline::Close::Settle { actual, partial }) => {
                            let extra = [
                                request.as_str().to_owned(),
                                actual.get().to_string(),
                                if *partial { "1" } else { "0" }.to_owned(),
                            ];
                            self.call_direct("settle_quota", &scripts::quota().settle, &tenant, &extra).await?;
                        }
                        Some(offline::Close::Release) => {
                            self.call_direct(
                                "release_quota",
                                &scripts::quota().release,
                                &tenant,
                                &[request.as_str().to_owned()],
                            )
                            .await?;
                        }
                        None => {}
                    }
                    true
                }
                offline::Op::Settle { request, actual, partial } => {
                    let extra = [
                        request.as_str().to_owned(),
                        actual.get().to_string(),
                        if *partial { "1" } else { "0" }.to_owned(),
                    ];
                    self.call_direct("settle_quota", &scripts::quota().settle, &tenant, &extra).await?;
                    true
                }
                offline::Op::Release { request } => {
                    self.call_direct(
                        "release_quota",
                        &scripts::quota().release,
                        &tenant,
                        &[request.as_str().to_owned()],
                    )
                    .await?;
                    true
                }
            };
            if applied {
                let mut journal = self.inner.offline.lock().expect("offline journal lock");
                journal.remove(&tenant, &op);
                if let Some(m) = &self.inner.metrics {
                    m.offline_pending.set(journal.len() as i64);
                    m.fallback.with_label_values(&["any", "replayed"]).inc();
                }
                if journal.is_empty() {
                    self.inner.has_offline.store(false, Ordering::Release);
                }
                done += 1;
            }
        }
        if done > 0 {
            tracing::info!(operations = done, "charged to redis what was admitted while it was unreachable");
        }
        Ok(done)
    }

    /// Waits for this operation's turn in the tenant's next shared call of `name`
    /// (`reserve_quota` or `settle_quota`): its own reply, or `None` when it must go alone
    /// (coalescing off, Redis unreachable, or a reply that was not per request).
    async fn coalesced(&self, name: &'static str, tenant: &TenantId, extra: &[String]) -> Option<Vec<Value>> {
        if self.inner.coalesce.load(Ordering::Relaxed) <= 1 || self.inner.breaker.is_open() {
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let key = (name, tenant.clone());
        let start = {
            let mut waiting = self.inner.waiting.lock().expect("quota queue lock");
            let w = waiting.entry(key.clone()).or_default();
            w.ops.push((extra.to_vec(), tx));
            !std::mem::replace(&mut w.running, true)
        };
        if start {
            let this = self.clone();
            tokio::spawn(async move { this.run_waiting(key).await });
        }
        rx.await.ok().flatten()
    }

    /// Serves the waiting operations of one kind for one tenant, a shared call at a time,
    /// until none wait.
    async fn run_waiting(&self, key: (&'static str, TenantId)) {
        // Whatever happens to this task, nothing is left waiting for it.
        struct Idle<'a>(&'a Quotas, &'a (&'static str, TenantId));
        impl Drop for Idle<'_> {
            fn drop(&mut self) {
                if let Ok(mut waiting) = self.0.inner.waiting.lock() {
                    if let Some(w) = waiting.get_mut(self.1) {
                        w.running = false;
                        w.ops.clear();
                    }
                }
            }
        }
        let _idle = Idle(self, &key);
        let (name, tenant) = (key.0, &key.1);
        let script = if name == "settle_quota" { &scripts::quota().settle } else { &scripts::quota().reserve };
        loop {
            let max = self.inner.coalesce.load(Ordering::Relaxed);
            let batch: Vec<(Vec<String>, Slot)> = {
                let mut waiting = self.inner.waiting.lock().expect("quota queue lock");
                let w = waiting.entry(key.clone()).or_default();
                // A caller that gave up is not decided for: nothing is reserved for nobody.
                w.ops.retain(|(_, slot)| !slot.is_closed());
                if w.ops.is_empty() {
                    w.running = false;
                    return;
                }
                let n = w.ops.len().min(max);
                w.ops.drain(..n).collect()
            };
            let extra: Vec<String> = batch.iter().flat_map(|(args, _)| args.iter().cloned()).collect();
            let mut replies: Vec<Option<Vec<Value>>> = match self.call(name, script, tenant, &extra).await {
                Ok(reply) if batch.len() == 1 => vec![Some(reply)],
                Ok(reply) => per_request(reply, batch.len()),
                Err(_) => Vec::new(),
            };
            replies.resize(batch.len(), None);
            for ((_, slot), reply) in batch.into_iter().zip(replies) {
                let _ = slot.send(reply);
            }
        }
    }

    /// Runs a script once (with one retry when the period turned), flushing the offline
    /// journal first when there is one.
    async fn call(
        &self,
        name: &'static str,
        script: &Script,
        tenant: &TenantId,
        extra: &[String],
    ) -> Result<Vec<Value>, CallError> {
        if self.inner.breaker.is_open() {
            return Err(CallError::Unreachable(Breaker::skipped_error()));
        }
        if self.inner.has_offline.load(Ordering::Acquire) {
            match self.flush_offline().await {
                Ok(_) => {}
                Err(QuotaError::Redis(e)) if is_unreachable(&e) => return Err(self.went_down(e)),
                Err(QuotaError::Unavailable { source, .. }) => return Err(self.went_down(source)),
                // Kept for the next attempt; this caller's own operation is not held up.
                Err(other) => {
                    tracing::error!(error = %other, "replaying the offline journal failed; kept for the next attempt")
                }
            }
        }
        let mut result = self.call_direct(name, script, tenant, extra).await;
        // After an outage the connection manager reports the failed reconnect once and
        // only then reconnects: one immediate retry (not after a timeout, which already
        // waited) lets the first call after Redis returns succeed.
        if let Err(QuotaError::Redis(e)) = &result {
            if is_unreachable(e) && !e.is_timeout() {
                result = self.call_direct(name, script, tenant, extra).await;
            }
        }
        match result {
            Ok(reply) => {
                self.inner.breaker.reset();
                if self.inner.redis_down.swap(false, Ordering::AcqRel) {
                    tracing::info!("redis answers again: quota decisions are made in redis");
                }
                Ok(reply)
            }
            Err(QuotaError::Redis(e)) if is_unreachable(&e) => Err(self.went_down(e)),
            Err(other) => Err(CallError::Failed(other)),
        }
    }

    fn went_down(&self, error: redis::RedisError) -> CallError {
        self.inner.breaker.trip();
        if !self.inner.redis_down.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %error, "redis unreachable: quota decisions follow each tenant's fallback policy");
        }
        CallError::Unreachable(error)
    }

    async fn call_direct(
        &self,
        name: &'static str,
        script: &Script,
        tenant: &TenantId,
        extra: &[String],
    ) -> Result<Vec<Value>, QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let mut period = Period::of(self.inner.clock.guess());
        for _attempt in 0..2 {
            let keys = &self.inner.keys;
            let t = tenant.as_str();
            let mut call = script.key(keys.quota_meta(t));
            call.key(keys.quota_state(t))
                .key(keys.quota_ledger(t))
                .key(keys.quota_leases(t))
                .key(keys.quota_period(t, &period.to_string()))
                .key(keys.quota_period(t, &period.previous().to_string()))
                .arg(period.to_string())
                .arg(period.previous().to_string())
                .arg(self.inner.clock.script_arg());
            for a in extra {
                call.arg(a);
            }
            let started = Instant::now();
            let reply: Value = call.invoke_async(&mut conn).await.map_err(QuotaError::Redis)?;
            if let Some(m) = &self.inner.metrics {
                m.script_seconds.with_label_values(&[name]).observe(started.elapsed().as_secs_f64());
            }
            let items = match reply {
                Value::Array(items) => items,
                other => return Err(QuotaError::Protocol { script: name, detail: format!("not an array: {other:?}") }),
            };
            let f = Fields::new(name, &items);
            if items.len() == 2 && f.str(0).ok() == Some("period") {
                let actual = f.str(1)?;
                period = Period::parse(actual)
                    .ok_or_else(|| QuotaError::Protocol { script: name, detail: format!("bad period {actual:?}") })?;
                continue;
            }
            return Ok(items);
        }
        Err(QuotaError::Protocol { script: name, detail: "the period changed twice during one call".into() })
    }

    /// Learns the tenant's fallback policy when its snapshot version is new to this client.
    async fn note_version(&self, tenant: &TenantId, version: u64) {
        let known = self.inner.policies.lock().expect("policy lock").get(tenant).map(|k| k.version);
        if known == Some(version) {
            return;
        }
        let Ok(mut conn) = self.inner.redis.connection().await else { return };
        let fields: redis::RedisResult<(Option<String>, Option<u64>)> = redis::cmd("HMGET")
            .arg(self.inner.keys.quota_meta(tenant.as_str()))
            .arg("policy")
            .arg("fallback_allowance")
            .query_async(&mut conn)
            .await;
        let policy = match fields {
            Ok((Some(p), Some(allowance))) if p == "fail_open_limited" => {
                match Tokens::parse("fallback_allowance", allowance as i128) {
                    Ok(allowance) => FallbackPolicy::FailOpenLimited { allowance },
                    Err(_) => FallbackPolicy::FailClosed,
                }
            }
            Ok(_) => FallbackPolicy::FailClosed,
            Err(_) => return,
        };
        self.inner.policies.lock().expect("policy lock").insert(tenant.clone(), KnownPolicy { version, policy });
    }

    fn policy(&self, tenant: &TenantId) -> FallbackPolicy {
        self.inner
            .policies
            .lock()
            .expect("policy lock")
            .get(tenant)
            .map(|k| k.policy)
            .unwrap_or(FallbackPolicy::FailClosed)
    }

    fn reserve_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        error: redis::RedisError,
    ) -> Result<ReserveOutcome, QuotaError> {
        let policy = self.policy(tenant);
        let FallbackPolicy::FailOpenLimited { allowance } = policy else {
            if let Some(m) = &self.inner.metrics {
                m.fallback.with_label_values(&["fail_closed", "refused"]).inc();
            }
            return Err(QuotaError::Unavailable { tenant: tenant.clone(), policy: policy.name(), source: error });
        };
        let mut journal = self.inner.offline.lock().expect("offline journal lock");
        let outcome = journal.admit(tenant, request, tokens, allowance.get());
        let metric_event = match &outcome {
            ReserveOutcome::Reserved(r) if r.replayed => None,
            ReserveOutcome::Reserved(_) => Some(("admitted", "none")),
            ReserveOutcome::Refused(_) => Some(("refused", Dimension::FallbackAllowance.name())),
        };
        if let (Some(m), Some((event, dimension))) = (&self.inner.metrics, metric_event) {
            m.fallback.with_label_values(&["fail_open_limited", event]).inc();
            m.reserves.with_label_values(&[event, dimension, Source::Fallback.name()]).inc();
            m.offline_pending.set(journal.len() as i64);
        }
        if metric_event.map(|(e, _)| e) == Some("admitted") {
            tracing::warn!(tenant = %tenant, request_id = %request, tokens = tokens.get(), "admitted without redis under fail_open_limited; charged when redis is back");
        }
        if !journal.is_empty() {
            self.inner.has_offline.store(true, Ordering::Release);
        }
        Ok(outcome)
    }

    fn settle_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
        error: redis::RedisError,
    ) -> SettleOutcome {
        let mut journal = self.inner.offline.lock().expect("offline journal lock");
        let outcome = journal.settle(tenant, request, actual, partial);
        tracing::warn!(tenant = %tenant, request_id = %request, error = %error, "redis unreachable: settle kept until it answers");
        self.inner.has_offline.store(true, Ordering::Release);
        if let Some(m) = &self.inner.metrics {
            m.offline_pending.set(journal.len() as i64);
        }
        outcome
    }

    fn release_offline(&self, tenant: &TenantId, request: &RequestId, error: redis::RedisError) -> ReleaseOutcome {
        let mut journal = self.inner.offline.lock().expect("offline journal lock");
        let outcome = journal.release(tenant, request);
        tracing::warn!(tenant = %tenant, request_id = %request, error = %error, "redis unreachable: release kept until it answers");
        self.inner.has_offline.store(true, Ordering::Release);
        if let Some(m) = &self.inner.metrics {
            m.offline_pending.set(journal.len() as i64);
        }
        outcome
    }
}

impl From<ReplyError> for QuotaError {
    fn from(e: ReplyError) -> Self {
        Self::Protocol { script: e.script, detail: e.detail }
    }
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

/// The replies of a shared call, one per request in order; empty when the call answered
/// for none of them in particular (an unknown tenant: each goes alone and hears it).
fn per_request(reply: Vec<Value>, n: usize) -> Vec<Option<Vec<Value>>> {
    let mut items = reply.into_iter();
    match (items.next(), items.next()) {
        (Some(Value::BulkString(tag)), Some(Value::Array(replies))) if tag == b"batch" && replies.len() == n => replies
            .into_iter()
            .map(|r| match r {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

enum CallError {
    Unreachable(redis::RedisError),
    Failed(QuotaError),
}

impl CallError {
    fn into_quota_error(self) -> QuotaError {
        match self {
            Self::Unreachable(e) => QuotaError::Redis(e),
            Self::Failed(e) => e,
        }
    }
}
