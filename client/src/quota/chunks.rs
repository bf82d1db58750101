//! Chunks: a hot tenant's reserves served from a chunk of its tokens this instance holds
//! in Redis (`lua/chunk_lib.lua`), so that they skip the walk over the tenant's buckets.
//!
//! The chunk is Redis's, not this process's: its tokens are counted as reserved there from
//! the moment it is taken, each reserve served from it is checked and recorded by the
//! reserve script as any other (the request's daily count and concurrency lease, its
//! ledger entry, its retry answered on any instance), and settle, release and the sweeper
//! treat the reservation as any other. So the limit holds fleet-wide and nothing here
//! decides alone: this module only says, per reserve, whether to use a chunk and how large
//! a new one should be. A chunk whose holder dies comes back when its lease ends (the
//! sweeper, a take, or a reserve about to be refused for tokens returns it); on shutdown
//! [`Quotas::return_chunks`] returns every chunk at once.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::call::CallError;
use super::{QuotaError, Quotas, TenantId};
use crate::reply::Fields;
use crate::scripts;

/// The longest a chunk may be held (Redis takes it back after its lease).
pub const MAX_CHUNK_LEASE: Duration = Duration::from_secs(600);

/// When this instance serves a tenant's reserves from a chunk.
#[derive(Debug, Clone)]
pub struct ChunkSettings {
    /// The start of this instance's name in Redis (see [`Quotas::set_chunks`]).
    name: String,
    /// A tenant is hot for this instance once it sends this many reserves a second here
    /// (measured over each second; 0: only the tenants in `hot`).
    hot_rate: u32,
    /// Tenants always served from chunks (`hot: true`).
    hot: HashSet<TenantId>,
    /// How long a chunk is held at most: Redis takes back an expired one.
    lease: Duration,
}

impl ChunkSettings {
    /// Chunks for the tenants in `hot` and for any tenant sending `hot_rate` reserves a
    /// second or more here (0: none by rate), each held for `lease` at most (1 ms to
    /// [`MAX_CHUNK_LEASE`]). Each client given these settings holds its chunks under a
    /// name of its own: `name` (letters, digits, `.`, `-`, `_`; others are left out) and 16
    /// random hex digits.
    pub fn new(name: &str, hot_rate: u32, hot: HashSet<TenantId>, lease: Duration) -> Self {
        let lease = lease.clamp(Duration::from_millis(1), MAX_CHUNK_LEASE);
        let name =
            name.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')).take(40).collect();
        Self { name, hot_rate, hot, lease }
    }

    /// Reserves a second from which a tenant is hot here (0: none by rate).
    pub fn hot_rate(&self) -> u32 {
        self.hot_rate
    }

    /// The tenants always served from chunks.
    pub fn hot(&self) -> &HashSet<TenantId> {
        &self.hot
    }

    /// How long a chunk is held at most.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A holder name unique to one client.
    fn holder(&self) -> String {
        format!("{}-{}", self.name, super::unique_id())
    }
}

/// One tenant's reserve rate on this instance and the chunk it holds.
struct Heat {
    since: Instant,
    requests: u64,
    tokens: u64,
    /// Reserves and tokens a second over the last measured second.
    rate: f64,
    token_rate: f64,
    /// Tokens the tenant's chunk held after the last reply (0: none).
    held: u64,
    /// Reserves that asked for a chunk since the last return (0: it holds none).
    asked: u64,
}

/// The chunk state of a client: its settings and the tenants it measured.
#[derive(Default)]
pub(super) struct Chunks {
    settings: Option<ChunkSettings>,
    /// This client's name in Redis (made when chunks are turned on; kept when they are
    /// turned off, so that what it still holds can be returned).
    holder: Option<String>,
    tenants: HashMap<TenantId, Heat>,
    /// Tokens held in chunks over every tenant (the metric).
    held: u64,
}

impl Chunks {
    /// The chunk argument of one reserve of `tokens` for a tenant this client knows:
    /// `holder|want|lease_ms`, or empty when its reserves go the exact way. `want` is about
    /// a second of the tenant's tokens here (the script bounds it); 0 asks for no new chunk
    /// (a tenant no longer hot uses up what it holds).
    pub(super) fn argument(&mut self, tenant: &TenantId, tokens: u64) -> String {
        self.argument_at(tenant, tokens, Instant::now())
    }

    fn argument_at(&mut self, tenant: &TenantId, tokens: u64, now: Instant) -> String {
        let Some(settings) = &self.settings else { return String::new() };
        let always = settings.hot.contains(tenant);
        if settings.hot_rate == 0 && !always {
            return String::new();
        }
        let heat = self.tenants.entry(tenant.clone()).or_insert(Heat {
            since: now,
            requests: 0,
            tokens: 0,
            rate: 0.0,
            token_rate: 0.0,
            held: 0,
            asked: 0,
        });
        heat.requests = heat.requests.saturating_add(1);
        heat.tokens = heat.tokens.saturating_add(tokens);
        let elapsed = now.duration_since(heat.since);
        if elapsed >= Duration::from_secs(1) {
            heat.rate = heat.requests as f64 / elapsed.as_secs_f64();
            heat.token_rate = heat.tokens as f64 / elapsed.as_secs_f64();
            (heat.since, heat.requests, heat.tokens) = (now, 0, 0);
        }
        let hot = always || (settings.hot_rate > 0 && heat.rate >= f64::from(settings.hot_rate));
        if !hot && heat.held == 0 {
            return String::new();
        }
        let want = if hot { (heat.token_rate as u64).max(tokens) } else { 0 };
        heat.asked += 1;
        let holder = self.holder.as_deref().unwrap_or_default();
        format!("{holder}|{want}|{}", settings.lease.as_millis())
    }

    /// Notes what the tenant's chunk holds after a reply (`None`: none); returns the
    /// tokens held over every tenant.
    pub(super) fn note(&mut self, tenant: &TenantId, left: Option<u64>) -> u64 {
        if let Some(heat) = self.tenants.get_mut(tenant) {
            let left = left.unwrap_or(0);
            self.held = self.held.saturating_sub(heat.held) + left;
            heat.held = left;
        }
        self.held
    }
}

/// What [`Quotas::return_chunks`] gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Returned {
    pub chunks: u64,
    pub tokens: u64,
}

impl Quotas {
    /// Serves hot tenants' reserves from chunks ([`ChunkSettings`]), held under a name
    /// unique to this client (made the first time); `None` turns chunks off (what is held
    /// then comes back with its lease, or with [`Quotas::return_chunks`]).
    pub fn set_chunks(&self, settings: Option<ChunkSettings>) {
        let mut chunks = self.inner.chunks.lock().expect("chunks lock");
        if chunks.holder.is_none() {
            chunks.holder = settings.as_ref().map(ChunkSettings::holder);
        }
        chunks.settings = settings;
    }

    /// The name this client holds chunks under in Redis (`None` before chunks were on).
    pub fn chunk_holder(&self) -> Option<String> {
        self.inner.chunks.lock().expect("chunks lock").holder.clone()
    }

    /// Tokens this instance holds in chunks, as of the last replies.
    pub fn chunk_tokens(&self) -> u64 {
        self.inner.chunks.lock().expect("chunks lock").held
    }

    /// Returns every chunk this instance may hold (on shutdown: the tenants whose reserves
    /// asked for one since their last return): their tokens are
    /// available to every instance at once. A tenant whose return fails keeps its chunk
    /// until the lease ends; the first error is answered after the others were tried.
    pub async fn return_chunks(&self) -> Result<Returned, QuotaError> {
        let (holder, tenants) = {
            let chunks = self.inner.chunks.lock().expect("chunks lock");
            let Some(holder) = &chunks.holder else { return Ok(Returned::default()) };
            let asked = chunks.tenants.iter().filter(|(_, heat)| heat.asked > 0).map(|(t, h)| (t.clone(), h.asked));
            (holder.clone(), asked.collect::<Vec<_>>())
        };
        let mut returned = Returned::default();
        let mut first_error = None;
        for (tenant, asked) in tenants {
            let reply = self
                .call_direct("return_chunk", &scripts::quota().return_chunk, &tenant, std::slice::from_ref(&holder))
                .await;
            match reply.and_then(|items| Ok(Fields::new("return_chunk", &items).uint(1)?)) {
                Ok(tokens) => {
                    if tokens > 0 {
                        returned.chunks += 1;
                        returned.tokens += tokens;
                    }
                    self.returned(&tenant, asked);
                }
                Err(e) => {
                    tracing::warn!(tenant = %tenant, error = %e, "returning a chunk failed: it comes back when its lease ends");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(returned),
        }
    }

    /// The chunk argument of one reserve (see [`Chunks::argument`]).
    pub(super) fn chunk_argument(&self, tenant: &TenantId, tokens: u64) -> String {
        if !self.knows(tenant) {
            // Names sent from outside grow nothing here.
            return String::new();
        }
        self.inner.chunks.lock().expect("chunks lock").argument(tenant, tokens)
    }

    /// Notes that the tenant's chunk was returned after `asked` reserves had asked for one;
    /// a reserve that asked since may have taken a new one, which is then still counted.
    fn returned(&self, tenant: &TenantId, asked: u64) {
        let mut chunks = self.inner.chunks.lock().expect("chunks lock");
        if chunks.tenants.get(tenant).is_some_and(|heat| heat.asked == asked) {
            chunks.note(tenant, None);
            if let Some(heat) = chunks.tenants.get_mut(tenant) {
                heat.asked = 0;
            }
        }
        let held = chunks.held;
        drop(chunks);
        self.chunk_gauge(held);
    }

    fn chunk_gauge(&self, held: u64) {
        if let Some(m) = &self.inner.metrics {
            m.chunk_tokens.set(i64::try_from(held).unwrap_or(i64::MAX));
        }
    }

    /// How many tenants this client measures for chunks (known tenants that reserved while
    /// chunks were on).
    pub fn chunk_tenants(&self) -> usize {
        self.inner.chunks.lock().expect("chunks lock").tenants.len()
    }

    /// Notes what a reply said the tenant's chunk holds.
    pub(super) fn noted_chunk(&self, tenant: &TenantId, left: Option<u64>) {
        let held = self.inner.chunks.lock().expect("chunks lock").note(tenant, left);
        self.chunk_gauge(held);
    }

    /// Returns the chunk this instance holds for one tenant (it is no longer hot here).
    pub async fn return_chunk(&self, tenant: &TenantId) -> Result<u64, QuotaError> {
        let Some(holder) = self.chunk_holder() else { return Ok(0) };
        let asked = self.inner.chunks.lock().expect("chunks lock").tenants.get(tenant).map_or(0, |h| h.asked);
        let items = self
            .call("return_chunk", &scripts::quota().return_chunk, tenant, &[holder])
            .await
            .map_err(CallError::into_quota_error)?;
        let tokens = Fields::new("return_chunk", &items).uint(1)?;
        self.returned(tenant, asked);
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(hot_rate: u32, hot: &[&str]) -> Chunks {
        let hot = hot.iter().map(|t| TenantId::parse(t).unwrap()).collect();
        let settings = ChunkSettings::new("t", hot_rate, hot, Duration::from_secs(30));
        Chunks { holder: Some(settings.holder()), settings: Some(settings), ..Chunks::default() }
    }

    /// The `want` of an argument (`None`: no argument).
    fn want(argument: &str) -> Option<u64> {
        (!argument.is_empty()).then(|| argument.split('|').nth(1).unwrap().parse().unwrap())
    }

    #[test]
    fn a_tenant_turns_hot_at_its_rate_asks_for_a_second_of_its_tokens_and_uses_up_its_chunk_when_it_cools() {
        let mut c = chunks(10, &[]);
        let acme = TenantId::parse("acme").unwrap();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        // No rate measured in the first second; then 6 a second: below 10.
        assert_eq!(want(&c.argument_at(&acme, 100, at(0))), None);
        for i in 1..5 {
            assert_eq!(want(&c.argument_at(&acme, 100, at(i * 100))), None);
        }
        assert_eq!(want(&c.argument_at(&acme, 100, at(1_000))), None, "6 reserves in a second");

        // 20 reserves of 100 in the next second: hot, asking for a second's 2,000 tokens.
        for i in 0..19 {
            assert_eq!(want(&c.argument_at(&acme, 100, at(1_000 + i * 50))), None);
        }
        assert_eq!(want(&c.argument_at(&acme, 100, at(2_000))), Some(2_000));
        assert_eq!(c.note(&acme, Some(1_500)), 1_500);

        // It cools to one reserve a second: it uses up its chunk (want 0) and then goes the
        // exact way.
        assert_eq!(want(&c.argument_at(&acme, 100, at(3_000))), Some(0));
        assert_eq!(c.note(&acme, Some(0)), 0);
        assert_eq!(want(&c.argument_at(&acme, 100, at(3_100))), None);
    }

    #[test]
    fn a_named_tenant_is_hot_from_its_first_reserve_and_no_other_is_measured_without_a_rate() {
        let mut c = chunks(0, &["acme"]);
        let (acme, other) = (TenantId::parse("acme").unwrap(), TenantId::parse("other").unwrap());
        assert_eq!(want(&c.argument_at(&acme, 70, Instant::now())), Some(70));
        assert_eq!(want(&c.argument_at(&other, 70, Instant::now())), None);
        assert_eq!(c.tenants.len(), 1);
        let huge = (1u64 << 53) - 1;
        for _ in 0..3_000 {
            c.argument_at(&acme, huge, Instant::now());
        }
        assert_eq!(c.tenants[&acme].tokens, u64::MAX, "saturates, never overflows");
    }
}
