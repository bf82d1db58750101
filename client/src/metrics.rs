//! Prometheus metrics of the data plane, registered into the embedding application's registry.

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// What the quota client records.
#[derive(Clone)]
pub struct QuotaMetrics {
    /// Reservations by outcome (`admitted`|`refused`), dimension (`none` when admitted)
    /// and source (`redis`|`fallback`).
    pub reserves: IntCounterVec,
    /// Refused reservations by tenant, dimension and source: which tenant hits which limit
    /// (tenants the store knows only: a name sent from outside is refused before).
    pub refusals: IntCounterVec,
    /// Reserved minus actual tokens of each settle (negative: an overdraft).
    pub settle_delta: Histogram,
    /// Actual over reserved tokens of each settle (1: the estimate was exact; above 1: an
    /// overdraft), for the estimate's error.
    pub settle_ratio: Histogram,
    /// Script round-trip latency by script.
    pub script_seconds: HistogramVec,
    /// Admissions, refusals and replays made under a fallback policy, by policy and event.
    pub fallback: IntCounterVec,
    /// Operations made while Redis was away and not yet charged to it.
    pub offline_pending: IntGauge,
    /// Tokens this instance holds in chunks (hot tenants), as of the last replies.
    pub chunk_tokens: IntGauge,
}

impl QuotaMetrics {
    /// Creates the metrics and registers them; fails if they are registered already.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let reserves = IntCounterVec::new(
            Opts::new("tessera_quota_reserves_total", "Quota reservations by outcome, dimension and source"),
            &["outcome", "dimension", "source"],
        )?;
        let refusals = IntCounterVec::new(
            Opts::new("tessera_quota_refusals_total", "Refused quota reservations by tenant, dimension and source"),
            &["tenant", "dimension", "source"],
        )?;
        let mut buckets = vec![];
        for b in [1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0] {
            buckets.push(-b);
        }
        buckets.reverse();
        buckets.push(0.0);
        buckets.extend([1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]);
        let settle_delta = Histogram::with_opts(
            HistogramOpts::new("tessera_quota_settle_delta_tokens", "Reserved minus actual tokens per settle")
                .buckets(buckets),
        )?;
        let settle_ratio = Histogram::with_opts(
            HistogramOpts::new("tessera_quota_settle_ratio", "Actual over reserved tokens per settle")
                .buckets(vec![0.1, 0.25, 0.5, 0.7, 0.9, 1.0, 1.1, 1.3, 1.5, 2.0, 4.0]),
        )?;
        let script_seconds = HistogramVec::new(
            HistogramOpts::new("tessera_redis_script_seconds", "Redis script round-trip latency")
                .buckets(vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1.0]),
            &["script"],
        )?;
        let fallback = IntCounterVec::new(
            Opts::new("tessera_quota_fallback_total", "Quota decisions made while Redis was unreachable"),
            &["policy", "event"],
        )?;
        let offline_pending = IntGauge::new(
            "tessera_quota_offline_pending",
            "Quota operations made while Redis was away, not yet charged to Redis",
        )?;
        registry.register(Box::new(reserves.clone()))?;
        registry.register(Box::new(refusals.clone()))?;
        registry.register(Box::new(settle_delta.clone()))?;
        registry.register(Box::new(settle_ratio.clone()))?;
        registry.register(Box::new(script_seconds.clone()))?;
        registry.register(Box::new(fallback.clone()))?;
        registry.register(Box::new(offline_pending.clone()))?;
        let chunk_tokens = IntGauge::new(
            "tessera_quota_chunk_tokens",
            "Tokens this instance holds in chunks of hot tenants' quotas, as of the last replies",
        )?;
        registry.register(Box::new(chunk_tokens.clone()))?;
        // The fallback's series exist from the start (at 0), so that a rule on their
        // increase sees the first admission made without Redis.
        for (policy, event) in
            [("fail_open_limited", "admitted"), ("fail_open_limited", "refused"), ("fail_closed", "refused")]
        {
            fallback.with_label_values(&[policy, event]);
        }
        Ok(Self {
            reserves,
            refusals,
            settle_delta,
            settle_ratio,
            script_seconds,
            fallback,
            offline_pending,
            chunk_tokens,
        })
    }
}

/// What the pool client records. The script latency histogram is shared with the quota
/// metrics (one metric name per registry).
#[derive(Clone)]
pub struct PoolMetrics {
    /// Draws by pool, member and source (`redis`|`local`|`static`).
    pub draws: IntCounterVec,
    /// Tickets skipped by draws, by pool and reason (`ejected`|`capped`).
    pub skips: IntCounterVec,
    /// Draws that found the list and the standby batch empty.
    pub empty: IntCounterVec,
    /// Tickets left after the last draw, per pool.
    pub list_length: prometheus::IntGaugeVec,
    /// Tickets this instance holds in leases, per pool.
    pub tickets_leased: prometheus::IntGaugeVec,
    /// Draws served from a lease (from memory), per pool.
    pub leased_draws: IntCounterVec,
    /// Script round-trip latency by script (the quota metrics' histogram).
    pub script_seconds: HistogramVec,
    /// Draws answered with an error, by pool and reason: `exhausted` (no drawable ticket:
    /// every member capped or ejected, or the lists empty) or `unavailable` (Redis away and
    /// no local or static fallback). A name the client never saw counts as `(unknown)`.
    pub refused: IntCounterVec,
}

impl PoolMetrics {
    /// Creates the pool metrics and registers them, sharing `script_seconds`.
    pub fn register(registry: &Registry, script_seconds: HistogramVec) -> prometheus::Result<Self> {
        let draws = IntCounterVec::new(
            Opts::new("tessera_pool_draws_total", "Pool draws by pool, member and source"),
            &["pool", "member", "source"],
        )?;
        let skips = IntCounterVec::new(
            Opts::new("tessera_pool_skips_total", "Tickets skipped by draws, by reason"),
            &["pool", "reason"],
        )?;
        let empty = IntCounterVec::new(
            Opts::new("tessera_pool_empty_total", "Draws that found no ticket and no standby batch"),
            &["pool"],
        )?;
        let list_length = prometheus::IntGaugeVec::new(
            Opts::new("tessera_pool_list_length", "Tickets left in the pool's list after the last draw"),
            &["pool"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new("tessera_pool_refused_draws_total", "Draws answered with an error, by pool and reason"),
            &["pool", "reason"],
        )?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(draws.clone()))?;
        registry.register(Box::new(skips.clone()))?;
        registry.register(Box::new(empty.clone()))?;
        let tickets_leased = prometheus::IntGaugeVec::new(
            Opts::new("tessera_pool_tickets_leased", "Tickets this instance holds in ticket leases, per pool"),
            &["pool"],
        )?;
        let leased_draws = IntCounterVec::new(
            Opts::new("tessera_pool_leased_draws_total", "Draws served from this instance's ticket leases, per pool"),
            &["pool"],
        )?;
        registry.register(Box::new(list_length.clone()))?;
        registry.register(Box::new(tickets_leased.clone()))?;
        registry.register(Box::new(leased_draws.clone()))?;
        Ok(Self { draws, skips, empty, list_length, tickets_leased, leased_draws, script_seconds, refused })
    }
}

/// What the outcome reporter records. The script latency histogram is shared with the
/// quota metrics (one metric name per registry).
#[derive(Clone)]
pub struct OutcomeMetrics {
    /// Outcomes recorded in Redis, by result (`ok`|`fail`).
    pub recorded: IntCounterVec,
    /// Reports that did not reach Redis (and are lost), by reason (`unreachable`|`error`).
    pub dropped: IntCounterVec,
    /// Script round-trip latency by script (the quota metrics' histogram).
    pub script_seconds: HistogramVec,
}

impl OutcomeMetrics {
    /// Creates the outcome metrics and registers them, sharing `script_seconds`.
    pub fn register(registry: &Registry, script_seconds: HistogramVec) -> prometheus::Result<Self> {
        let recorded = IntCounterVec::new(
            Opts::new("tessera_health_outcomes_total", "Channel outcomes recorded in Redis, by result"),
            &["result"],
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "tessera_health_reports_dropped_total",
                "Outcome reports lost because Redis did not take them, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(recorded.clone()))?;
        registry.register(Box::new(dropped.clone()))?;
        Ok(Self { recorded, dropped, script_seconds })
    }
}
