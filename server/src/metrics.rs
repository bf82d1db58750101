//! Prometheus metrics: one registry per application, exposed at `/metrics`.

use std::collections::HashMap;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::web;
use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The metrics every part of the server records into.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// HTTP requests by method, matched route pattern and status.
    pub http_requests: IntCounterVec,
    /// HTTP request latency by method and matched route pattern.
    pub http_duration: HistogramVec,
    /// 1 when a dependency answered the last readiness check, else 0.
    pub dependency_up: IntGaugeVec,
    /// The quota client's metrics (reserves, settle deltas, script latency, fallback).
    pub quota: client::QuotaMetrics,
    /// Open quota reservations across tenants, as counted by the last sweep.
    pub quota_open_reservations: IntGauge,
    /// Reservations the sweeper returned after their deadline.
    pub quota_swept: IntCounter,
    /// The pool client's metrics (draws by source, skips, empty pops, list length).
    pub pool: client::PoolMetrics,
    /// The outcome reporter's metrics (outcomes recorded by result, reports dropped).
    pub outcomes: client::OutcomeMetrics,
    /// Batches added by the refiller, by pool and mode (`append`|`standby`|`replace`).
    pub pool_refills: IntCounterVec,
    /// Route decisions of this instance's data plane, by route, rule (`default` when none
    /// matched) and pool.
    pub route_decisions: IntCounterVec,
    /// Tickets added by the refiller, by pool.
    pub pool_tickets_added: IntCounterVec,
    /// Scheduler job runs by job and outcome (`ok`, `error`, `skipped` when not leader).
    pub job_runs: IntCounterVec,
    /// Usage ledger rows written, by source (`stream`: drained; `instance`: the stream had
    /// lost them).
    pub usage_ledger_rows: IntCounterVec,
    /// Settle records this process keeps until the ledger holds them.
    pub usage_records_waiting: IntGauge,
    /// Tenants whose counters were restored from the usage ledger.
    pub usage_restores: IntCounter,
    /// Ledger rows of a request id used again after its done marker expired.
    pub usage_reused_request_ids: IntCounter,
    /// Repeat look-ups in the usage ledger (a reserve before Redis; a settle or release
    /// Redis did not know), by `operation` and `result`: `found` (answered from the ledger),
    /// `none`, `failed` (Postgres slow or away: a reserve went on without it).
    pub quota_ledger_lookups: IntCounterVec,
    /// Tokens the counters hold beyond the ledger (negative: fewer), per tenant and bucket,
    /// as the last compensation measured them.
    pub usage_drift: IntGaugeVec,
    /// What the alert rules in `ops/prometheus` watch that the metrics above do not say.
    pub watch: WatchMetrics,
}

/// The gauges the alert rules and the dashboard in `ops/` read: each says how far a
/// background loop is from where it should be, set by the loop itself on every run.
#[derive(Clone)]
pub struct WatchMetrics {
    /// A member's actual share of its pool's last minute of draws minus the share its
    /// weights give it, by pool and member, as the last sample measured it (no series
    /// while the sample has no actual share: no window, or no draws in it).
    pub pool_share_deviation: GaugeVec,
    /// The same deviation relative to the expected share ((actual − expected) / expected),
    /// so that a 5 % canary drawn at 0 % or at 14 % shows as −1 or +1.8, not as 5 or 9
    /// points; no series for a member whose expected share is 0.
    pub pool_share_deviation_ratio: GaugeVec,
    /// Outcomes reported per channel, by result (`ok`, `fail`): channels that exist only
    /// (a report for an unknown channel is refused before it counts).
    pub channel_outcomes: IntCounterVec,
    /// The sum of the latencies reported per channel (ms) and how many were measured: their
    /// rates' ratio is the mean latency.
    pub channel_latency_ms: IntCounterVec,
    pub channel_latency_samples: IntCounterVec,
    /// The latencies reported one by one (`latencies_ms`), per channel, in seconds.
    pub channel_latency_seconds: HistogramVec,
    /// How long the refiller's refill of a pool took (one script call, a batch added or
    /// nothing needed), by pool, in seconds.
    pub pool_refill_seconds: HistogramVec,
    /// Refills of a pool that failed (Redis errors, a batch that cannot be built), by pool.
    pub pool_refill_failures: IntCounterVec,
    /// When this instance last sampled a pool (unix seconds, Redis clock): a rule ignores
    /// the pool's other gauges here once they are older than a sample interval or two (a
    /// former leader of the sampler keeps its last values).
    pub pool_sampled_at: IntGaugeVec,
    /// Tickets in a pool's main list (not its standby batch) at the last sample: what the
    /// refiller compares with low-water.
    pub pool_tickets: IntGaugeVec,
    /// A pool's low-water mark as published (the main list is refilled below it).
    pub pool_low_water: IntGaugeVec,
    /// A pool's members per health state, at the last evaluation (every state has a
    /// series, 0 when no member is in it).
    pub health_members: IntGaugeVec,
    /// A pool's members the max-ejected-percent cap holds at the minimum weight instead of
    /// ejecting them, at the last evaluation.
    pub health_cap_bound: IntGaugeVec,
    /// Reservations past their deadline that the last sweep left in place (a sweep cut
    /// short by an error); a tenant whose sweep failed outright counts in
    /// `quota_sweep_failures` instead.
    pub quota_reservations_overdue: IntGauge,
    /// Tenants whose sweep failed (their overdue reservations stay until a sweep works).
    pub quota_sweep_failures: IntCounter,
    /// Outbox rows not delivered to Redis yet, after the last outbox run.
    pub outbox_pending: IntGauge,
    /// Age of the oldest undelivered outbox row (0 when none), after the last outbox run.
    pub outbox_oldest_age: Gauge,
    /// 1 while this instance leads a job, else 0 (set on each of the job's ticks, when the
    /// leadership is checked).
    pub job_leader: IntGaugeVec,
    /// Age of the oldest usage record the last drain read from the streams (0 when the
    /// streams held none): how far the usage ledger is behind Redis.
    pub usage_drain_lag: Gauge,
    /// Settle rows of the usage ledger whose charge to the counters is not decided yet
    /// (marked `charge_pending`; retried by each drain); -1 when Postgres did not answer.
    pub usage_uncharged_rows: IntGauge,
    /// The longest run of one member among a pool's draws of the last minute (a run whose
    /// last draw is in the minute), as the draw-log drain saw them; 0 when nothing was
    /// drawn (or the pool keeps no draw log).
    pub pool_longest_run: IntGaugeVec,
    /// The longest run the engine's ordering allows a pool's draws, from its largest
    /// member's expected share, its ordering and its batch size (`engine::order::run_bound`),
    /// as the pool sampler last computed it; no series for a pool of one drawable member or
    /// a `tiers` pool.
    pub pool_run_bound: IntGaugeVec,
    /// When this instance last drained a pool's draw log (unix seconds): as with
    /// `pool_sampled_at`, a former leader of the drain keeps its last values.
    pub pool_drained_at: IntGaugeVec,
    /// Live ramps by state (`running`, `paused`, `aborting`), as the last ramp_guard run
    /// counted them.
    pub ramps: IntGaugeVec,
    /// Breaches a ramp's guards called (each paused, stepped back or aborted a ramp).
    pub ramp_breaches: IntCounter,
    /// Each live ramp's canary share of its pool's weights now (0..1), by pool and ramp id,
    /// as the last ramp_guard run saw it; a ramp that ended loses its series.
    pub ramp_canary_share: GaugeVec,
    /// Webhook notifications waiting to be delivered (neither delivered nor given up),
    /// after the last delivery run.
    pub notifications_pending: IntGauge,
    /// Webhook deliveries that failed (each is tried again, up to its attempts).
    pub notification_failures: IntCounter,
}

impl WatchMetrics {
    fn register(registry: &Registry) -> prometheus::Result<Self> {
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| GaugeVec::new(Opts::new(name, help), labels);
        let int_gauge_vec = |name: &str, help: &str, labels: &[&str]| IntGaugeVec::new(Opts::new(name, help), labels);
        let watch = Self {
            pool_share_deviation: gauge_vec(
                "tessera_pool_share_deviation",
                "A member's actual share of the last minute's draws minus its expected share",
                &["pool", "member"],
            )?,
            pool_share_deviation_ratio: gauge_vec(
                "tessera_pool_share_deviation_ratio",
                "A member's actual share of the last minute's draws minus its expected share, over its expected share",
                &["pool", "member"],
            )?,
            channel_outcomes: IntCounterVec::new(
                Opts::new("tessera_channel_outcomes_total", "Outcomes reported per channel, by result"),
                &["channel", "result"],
            )?,
            channel_latency_ms: IntCounterVec::new(
                Opts::new("tessera_channel_latency_ms_total", "The sum of the latencies reported per channel (ms)"),
                &["channel"],
            )?,
            channel_latency_samples: IntCounterVec::new(
                Opts::new("tessera_channel_latency_samples_total", "Latencies reported per channel"),
                &["channel"],
            )?,
            channel_latency_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "tessera_channel_latency_seconds",
                    "The latencies reported one by one per channel (latencies_ms), in seconds",
                )
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]),
                &["channel"],
            )?,
            pool_refill_seconds: HistogramVec::new(
                HistogramOpts::new("tessera_pool_refill_seconds", "How long one refill of a pool took, by pool")
                    .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
                &["pool"],
            )?,
            pool_refill_failures: IntCounterVec::new(
                Opts::new("tessera_pool_refill_failures_total", "Refills of a pool that failed, by pool"),
                &["pool"],
            )?,
            pool_sampled_at: int_gauge_vec(
                "tessera_pool_sampled_at_seconds",
                "When this instance last sampled the pool (unix seconds)",
                &["pool"],
            )?,
            pool_tickets: int_gauge_vec(
                "tessera_pool_tickets",
                "Tickets in the pool's main list at the last sample (standby batch excluded)",
                &["pool"],
            )?,
            pool_low_water: int_gauge_vec(
                "tessera_pool_low_water",
                "The pool's low-water mark: its main list is refilled below it",
                &["pool"],
            )?,
            health_members: int_gauge_vec(
                "tessera_health_members",
                "A pool's members per health state at the last evaluation",
                &["pool", "state"],
            )?,
            health_cap_bound: int_gauge_vec(
                "tessera_health_cap_bound",
                "A pool's members held at the minimum weight by the max-ejected-percent cap",
                &["pool"],
            )?,
            quota_reservations_overdue: IntGauge::new(
                "tessera_quota_reservations_overdue",
                "Reservations past their deadline that the last sweep left in place",
            )?,
            quota_sweep_failures: IntCounter::new(
                "tessera_quota_sweep_failures_total",
                "Tenant sweeps that failed (their overdue reservations stay)",
            )?,
            outbox_pending: IntGauge::new("tessera_outbox_pending", "Outbox rows not yet delivered to Redis")?,
            outbox_oldest_age: Gauge::new(
                "tessera_outbox_oldest_age_seconds",
                "Age of the oldest undelivered outbox row (0 when none)",
            )?,
            job_leader: int_gauge_vec(
                "tessera_job_leader",
                "1 while this instance leads the job, else 0 (checked on each tick)",
                &["job"],
            )?,
            usage_drain_lag: Gauge::new(
                "tessera_usage_drain_lag_seconds",
                "Age of the oldest usage record the last drain read (0 when none)",
            )?,
            usage_uncharged_rows: IntGauge::new(
                "tessera_usage_uncharged_rows",
                "Usage ledger rows whose charge to the counters is not decided yet (retried by each drain)",
            )?,
            pool_longest_run: int_gauge_vec(
                "tessera_pool_longest_run",
                "The longest run of one member among the pool's draws of the last minute",
                &["pool"],
            )?,
            pool_run_bound: int_gauge_vec(
                "tessera_pool_run_bound",
                "The longest run of one member the pool's ordering allows at its current shares",
                &["pool"],
            )?,
            pool_drained_at: int_gauge_vec(
                "tessera_pool_drained_at_seconds",
                "When this instance last drained the pool's draw log (unix seconds)",
                &["pool"],
            )?,
            ramps: int_gauge_vec("tessera_ramps", "Live ramps by state at the last ramp_guard run", &["state"])?,
            ramp_canary_share: gauge_vec(
                "tessera_ramp_canary_share",
                "A live ramp's canary share of its pool's weights now (0..1)",
                &["pool", "ramp"],
            )?,
            ramp_breaches: IntCounter::new(
                "tessera_ramp_breaches_total",
                "Breaches a ramp's guards called (pause, step back or abort)",
            )?,
            notifications_pending: IntGauge::new(
                "tessera_notifications_pending",
                "Webhook notifications not delivered yet (nor given up), after the last delivery run",
            )?,
            notification_failures: IntCounter::new(
                "tessera_notification_failures_total",
                "Webhook deliveries that failed (each tried again up to its attempts)",
            )?,
        };
        for state in api::ramps::RampState::LIVE {
            watch.ramps.with_label_values(&[state.as_str()]).set(0);
        }
        for collector in [
            Box::new(watch.pool_share_deviation.clone()) as Box<dyn Collector>,
            Box::new(watch.pool_share_deviation_ratio.clone()),
            Box::new(watch.channel_outcomes.clone()),
            Box::new(watch.channel_latency_ms.clone()),
            Box::new(watch.channel_latency_samples.clone()),
            Box::new(watch.channel_latency_seconds.clone()),
            Box::new(watch.pool_refill_seconds.clone()),
            Box::new(watch.pool_refill_failures.clone()),
            Box::new(watch.pool_sampled_at.clone()),
            Box::new(watch.pool_tickets.clone()),
            Box::new(watch.pool_low_water.clone()),
            Box::new(watch.health_members.clone()),
            Box::new(watch.health_cap_bound.clone()),
            Box::new(watch.quota_reservations_overdue.clone()),
            Box::new(watch.quota_sweep_failures.clone()),
            Box::new(watch.outbox_pending.clone()),
            Box::new(watch.outbox_oldest_age.clone()),
            Box::new(watch.job_leader.clone()),
            Box::new(watch.usage_drain_lag.clone()),
            Box::new(watch.usage_uncharged_rows.clone()),
            Box::new(watch.pool_longest_run.clone()),
            Box::new(watch.pool_run_bound.clone()),
            Box::new(watch.pool_drained_at.clone()),
            Box::new(watch.ramps.clone()),
            Box::new(watch.ramp_breaches.clone()),
            Box::new(watch.ramp_canary_share.clone()),
            Box::new(watch.notifications_pending.clone()),
            Box::new(watch.notification_failures.clone()),
        ] {
            registry.register(collector)?;
        }
        Ok(watch)
    }
}

/// Removes the series of `vec` whose labels `keep` turns down: the series of a pool or a
/// member that is gone would otherwise hold its last value (and keep an alert firing)
/// until the process restarts.
pub fn retain_series<T: MetricVecBuilder>(vec: &MetricVec<T>, keep: impl Fn(&HashMap<&str, &str>) -> bool) {
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels: HashMap<&str, &str> = metric.get_label().iter().map(|l| (l.name(), l.value())).collect();
            if !keep(&labels) {
                // Err only when the labels do not match the vector's, which they do.
                let _ = vec.remove(&labels);
            }
        }
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new("tessera_http_requests_total", "HTTP requests served"),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new("tessera_http_request_duration_seconds", "HTTP request latency")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
            &["method", "route"],
        )
        .expect("valid metric");
        let dependency_up = IntGaugeVec::new(
            Opts::new("tessera_dependency_up", "1 when the dependency answered the last readiness check"),
            &["dependency"],
        )
        .expect("valid metric");
        let quota_open_reservations =
            IntGauge::new("tessera_quota_open_reservations", "Open quota reservations, as counted by the last sweep")
                .expect("valid metric");
        let quota_swept =
            IntCounter::new("tessera_quota_swept_total", "Quota reservations released after their deadline")
                .expect("valid metric");
        let job_runs = IntCounterVec::new(
            Opts::new("tessera_job_runs_total", "Scheduler job runs by outcome (skipped: another instance leads)"),
            &["job", "outcome"],
        )
        .expect("valid metric");
        let usage_ledger_rows = IntCounterVec::new(
            Opts::new("tessera_usage_ledger_rows_total", "Usage ledger rows written, by source"),
            &["source"],
        )
        .expect("valid metric");
        let usage_records_waiting = IntGauge::new(
            "tessera_usage_records_waiting",
            "Settle records this process keeps until the usage ledger holds them",
        )
        .expect("valid metric");
        let usage_restores = IntCounter::new(
            "tessera_usage_restores_total",
            "Tenants whose counters were restored from the usage ledger",
        )
        .expect("valid metric");
        let usage_reused_request_ids = IntCounter::new(
            "tessera_usage_reused_request_ids_total",
            "Ledger rows of a request id used again after its done marker expired (written as rows of their own)",
        )
        .expect("valid metric");
        let quota_ledger_lookups = IntCounterVec::new(
            Opts::new(
                "tessera_quota_ledger_lookups_total",
                "Repeated quota calls looked up in the usage ledger, by operation and result (found, none, failed)",
            ),
            &["operation", "result"],
        )
        .expect("valid metric");
        let usage_drift = IntGaugeVec::new(
            Opts::new("tessera_usage_drift_tokens", "Tokens the Redis counters hold beyond the usage ledger"),
            &["tenant", "bucket"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(usage_ledger_rows.clone()) as Box<dyn Collector>,
            Box::new(usage_records_waiting.clone()),
            Box::new(usage_restores.clone()),
            Box::new(usage_reused_request_ids.clone()),
            Box::new(quota_ledger_lookups.clone()),
            Box::new(usage_drift.clone()),
            Box::new(http_requests.clone()),
            Box::new(http_duration.clone()),
            Box::new(dependency_up.clone()),
            Box::new(quota_open_reservations.clone()),
            Box::new(quota_swept.clone()),
            Box::new(job_runs.clone()),
        ] {
            registry.register(collector).expect("metric registered once");
        }
        let quota = client::QuotaMetrics::register(&registry).expect("quota metrics registered once");
        let pool = client::PoolMetrics::register(&registry, quota.script_seconds.clone())
            .expect("pool metrics registered once");
        let outcomes = client::OutcomeMetrics::register(&registry, quota.script_seconds.clone())
            .expect("outcome metrics registered once");
        let pool_refills = IntCounterVec::new(
            Opts::new("tessera_pool_refills_total", "Batches added to pools by the refiller"),
            &["pool", "mode"],
        )
        .expect("valid metric");
        let pool_tickets_added = IntCounterVec::new(
            Opts::new("tessera_pool_tickets_added_total", "Tickets added to pools by the refiller"),
            &["pool"],
        )
        .expect("valid metric");
        let route_decisions = IntCounterVec::new(
            Opts::new("tessera_route_decisions_total", "Requests routed, by route, matching rule and pool"),
            &["route", "rule", "pool"],
        )
        .expect("valid metric");
        registry.register(Box::new(route_decisions.clone())).expect("metric registered once");
        registry.register(Box::new(pool_refills.clone())).expect("metric registered once");
        registry.register(Box::new(pool_tickets_added.clone())).expect("metric registered once");
        let watch = WatchMetrics::register(&registry).expect("watch metrics registered once");
        Self {
            registry,
            http_requests,
            http_duration,
            dependency_up,
            quota,
            pool,
            outcomes,
            pool_refills,
            route_decisions,
            pool_tickets_added,
            quota_open_reservations,
            quota_swept,
            job_runs,
            usage_ledger_rows,
            usage_records_waiting,
            usage_restores,
            usage_reused_request_ids,
            quota_ledger_lookups,
            usage_drift,
            watch,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer).expect("text encoding of gathered metrics");
        String::from_utf8(buffer).expect("prometheus text is utf-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A request method as a label, from a fixed set: a caller may send any token as a method,
/// and each new label value would be a new series kept for the life of the process.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts and times every request by its matched route pattern (not the raw path, which
/// would give one series per pool name or id), into the app's `web::Data<Metrics>`.
pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let recorder: Option<Metrics> = req.app_data::<web::Data<Metrics>>().map(|m| m.get_ref().clone());
    let method = method_label(req.method());
    let route = req.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
    let response = next.call(req).await;
    let status = match &response {
        Ok(res) => res.status().as_u16().to_string(),
        Err(e) => e.as_response_error().status_code().as_u16().to_string(),
    };
    if let Some(recorder) = recorder {
        recorder.http_requests.with_label_values(&[method, &route, &status]).inc();
        recorder.http_duration.with_label_values(&[method, &route]).observe(started.elapsed().as_secs_f64());
    }
    response
}
