//! `tessera bench quota`: what a reserve+settle pair costs against one raw `EVALSHA`, and
//! whether 64 workers racing for one tenant can oversell it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use client::quota::{
    ChunkSettings, FallbackPolicy, RequestId, ReserveOutcome, SettleOutcome, TenantId, TenantQuota, TokenCount, Tokens,
};
use client::{Keys, Quotas, RedisHandle};
use rand::Rng;
use serde::Serialize;

use crate::cli::BenchQuotaArgs;
use crate::configuration::Settings;

/// The figures `--json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub concurrency: u32,
    pub seconds: u64,
    /// Raw `EVALSHA` of a script returning 1, per second.
    pub baseline_ops: f64,
    /// reserve + settle pairs per second (concurrent operations for the tenant coalesced:
    /// up to 64 share one script call).
    pub pair_ops: f64,
    /// `pair_ops / baseline_ops`; a pair is two calls, so 0.5 is the ceiling without
    /// coalescing.
    pub pair_ratio: f64,
    /// The same with coalescing off: two script calls per pair.
    pub pair_single_ops: f64,
    pub pair_single_ratio: f64,
    /// Redis time per coalesced pair: the `usec` of script calls in `INFO commandstats`,
    /// summed over every primary.
    pub redis_us_per_pair: f64,
    /// The same with one script call per operation.
    pub redis_us_per_pair_single: f64,
    /// Main-thread CPU of Redis per coalesced pair (`INFO cpu`).
    pub redis_cpu_us_per_pair: f64,
    /// Of `redis_us_per_pair` and `redis_us_per_pair_single`: the time of the Redis
    /// commands the scripts ran (`INFO commandstats`, every command but the script calls);
    /// the rest is the scripts' own Lua.
    pub redis_command_us_per_pair: f64,
    pub redis_command_us_per_pair_single: f64,
    /// Coalesced pairs per second of a hot tenant whose reserves come from chunks this
    /// client holds (`quota.hot_tenants`), the same run.
    pub chunk_pair_ops: f64,
    /// `chunk_pair_ops / pair_ops`.
    pub chunk_pair_ratio: f64,
    /// Redis time per pair of that phase (as `redis_us_per_pair`).
    pub redis_us_per_pair_chunk: f64,
    /// The same two phases for a tenant with `grants` live bonus grants, whose buckets the
    /// exact path walks and sorts on every reserve (a chunk does not): pairs per second
    /// exactly and from chunks, their ratio, and the Redis time per pair of each.
    pub grants: u32,
    pub grants_pair_ops: f64,
    pub grants_chunk_pair_ops: f64,
    pub grants_chunk_ratio: f64,
    pub redis_us_per_pair_grants: f64,
    pub redis_us_per_pair_grants_chunk: f64,
    /// Operations (a reserve or a settle) per script call in the coalesced phase: how many
    /// shared one reading of the tenant's snapshot and one write of its counters.
    pub ops_per_script_call: f64,
    /// The oversell run's quota (half its workers reserve through a client holding chunks,
    /// half exactly; the chunks are returned before the ledger is checked).
    pub oversell_quota: u64,
    /// Reservations admitted in the oversell run, and refused.
    pub oversell_admitted: u64,
    pub oversell_refused: u64,
    /// Tokens charged beyond the quota (must be 0).
    pub oversold: u64,
    /// used + reserved in Redis equals the sum of the charges, nothing left reserved.
    pub ledger_ok: bool,
    /// Redis bytes per finished request for its done marker (`bench/markers.rs`).
    #[serde(flatten)]
    pub markers: super::markers::MarkerReport,
}

const OVERSELL_WORKERS: u32 = 64;
/// Live bonus grants of the tenant in the grants phases.
const GRANTS: u32 = 50;
/// Finished requests per window in the done-marker phase.
const MARKERS_PER_WINDOW: u64 = 10_000;

pub(super) fn tenant_quota(tokens: u64) -> TenantQuota {
    TenantQuota {
        version: 1,
        monthly_tokens: TokenCount::parse("monthly_tokens", tokens as i128).expect("valid"),
        daily_requests: 1 << 40,
        concurrency: 1_000_000,
        grants: Vec::new(),
        reservation_ttl: Duration::from_secs(600),
        retention_days: 1,
        idempotency_window: client::quota::DEFAULT_IDEMPOTENCY_WINDOW,
        fallback: FallbackPolicy::FailClosed,
    }
}

/// A plan as [`tenant_quota`] with `n` live bonus grants of 2^45 tokens, each its own
/// priority.
fn with_grants(n: u32) -> TenantQuota {
    let grants = (0..n)
        .map(|i| client::quota::Grant {
            id: client::quota::GrantId::parse(&format!("g{i}")).expect("valid"),
            kind: client::quota::GrantKind::Bonus { priority: i },
            amount: Tokens::parse("amount", 1 << 45).expect("valid"),
            starts_at: None,
            expires_at: None,
        })
        .collect();
    TenantQuota { grants, ..tenant_quota(1 << 50) }
}

/// Runs the benchmark against the configured Redis.
pub async fn run(settings: &Settings, args: &BenchQuotaArgs) -> anyhow::Result<Report> {
    let timeouts = client::RedisTimeouts::default();
    let redis = RedisHandle::on(settings.redis_target(timeouts)?, timeouts);
    let keys = Keys::new(super::run_prefix("quota"));
    let result = measure(&redis, &keys, args).await;
    let cleanup = super::remove_keys(&redis, &keys).await;
    let report = result?;
    cleanup.context("removing the benchmark's keys")?;
    Ok(report)
}

async fn measure(redis: &RedisHandle, keys: &Keys, args: &BenchQuotaArgs) -> anyhow::Result<Report> {
    let quotas = Quotas::new(redis.clone(), keys.clone());
    let duration = Duration::from_secs(args.seconds);
    let conn = redis.connection().await.context("connecting to redis")?;

    // Baseline: the cheapest possible script round trip at the same concurrency.
    let trivial = redis::Script::new("return 1");
    let (baseline_ops, _) = throughput(args.concurrency, duration, move |_worker, _i| {
        let (mut conn, trivial) = (conn.clone(), trivial.clone());
        async move {
            let _: i64 = trivial.invoke_async(&mut conn).await?;
            Ok(())
        }
    })
    .await?;

    // Pairs: reserve then settle, each worker on its own request ids, one shared tenant;
    // coalesced (the client's default), then one call per operation.
    let tenant = TenantId::parse("bench-pairs").expect("valid");
    quotas.publish(&tenant, &tenant_quota(1 << 50)).await?;
    let pairs = |tag: &'static str, quotas: &Quotas, tenant: &TenantId| {
        let (quotas, tenant) = (quotas.clone(), tenant.clone());
        move |worker: u32, i: u64| {
            let (quotas, tenant) = (quotas.clone(), tenant.clone());
            async move {
                let request = RequestId::parse(&format!("{tag}{worker}-{i}")).expect("valid");
                let tokens = Tokens::parse("tokens", 100).expect("valid");
                match quotas.reserve(&tenant, &request, tokens).await? {
                    ReserveOutcome::Reserved(_) => {}
                    ReserveOutcome::Refused(r) => anyhow::bail!("pair refused: {r:?}"),
                }
                let actual = TokenCount::parse("actual_tokens", 60).expect("valid");
                quotas.settle(&tenant, &request, actual, false).await?;
                Ok(())
            }
        }
    };
    let spent_before = super::spent::read(redis).await?;
    let (pair_ops, pairs_made) = throughput(args.concurrency, duration, pairs("w", &quotas, &tenant)).await?;
    let spent_pairs = super::spent::read(redis).await?;
    quotas.set_coalescing(1);
    let pair_single = throughput(args.concurrency, duration, pairs("s", &quotas, &tenant)).await;
    quotas.set_coalescing(client::quota::DEFAULT_COALESCE);
    let (pair_single_ops, single_pairs_made) = pair_single?;
    let spent_single = super::spent::read(redis).await?;
    let single_spent = spent_single.since(spent_pairs);
    let pair_spent = spent_pairs.since(spent_before);

    // The same pairs for a hot tenant: reserves from chunks this client holds.
    let hot_tenant = TenantId::parse("bench-chunks").expect("valid");
    quotas.publish(&hot_tenant, &tenant_quota(1 << 50)).await?;
    let hot = hot_client(redis, keys, &hot_tenant);
    let chunked = throughput(args.concurrency, duration, pairs("c", &hot, &hot_tenant)).await;
    hot.return_chunks().await?;
    let (chunk_pair_ops, chunk_pairs_made) = chunked?;
    let spent_chunk = super::spent::read(redis).await?;
    let chunk_spent = spent_chunk.since(spent_single);

    // A tenant with many grants, exactly and from chunks.
    let grants_tenant = TenantId::parse("bench-grants").expect("valid");
    quotas.publish(&grants_tenant, &with_grants(GRANTS)).await?;
    let (grants_pair_ops, grants_made) =
        throughput(args.concurrency, duration, pairs("g", &quotas, &grants_tenant)).await?;
    let spent_grants = super::spent::read(redis).await?;
    let hot_grants = hot_client(redis, keys, &grants_tenant);
    let grants_chunked = throughput(args.concurrency, duration, pairs("h", &hot_grants, &grants_tenant)).await;
    hot_grants.return_chunks().await?;
    let (grants_chunk_pair_ops, grants_chunk_made) = grants_chunked?;
    let grants_chunk_spent = super::spent::read(redis).await?.since(spent_grants);
    let grants_spent = spent_grants.since(spent_chunk);

    // Oversell: 64 workers race for one quota until refused, settling random actuals.
    let quota: u64 = 1_000_000;
    let tenant = TenantId::parse("bench-oversell").expect("valid");
    quotas.publish(&tenant, &tenant_quota(quota)).await?;
    let charged = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let hot = hot_client(redis, keys, &tenant);
    let mut workers = Vec::new();
    for worker in 0..OVERSELL_WORKERS {
        let quotas = if worker % 2 == 0 { quotas.clone() } else { hot.clone() };
        let tenant = tenant.clone();
        let (charged, admitted, refused) = (charged.clone(), admitted.clone(), refused.clone());
        workers.push(tokio::spawn(async move {
            let mut open: Vec<(RequestId, u64)> = Vec::new();
            let mut refusals_in_a_row = 0;
            let mut i = 0u64;
            while refusals_in_a_row < 3 {
                i += 1;
                let amount = rand::rng().random_range(1..=5_000u64);
                let request = RequestId::parse(&format!("o{worker}-{i}")).expect("valid");
                let tokens = Tokens::parse("tokens", amount as i128).expect("valid");
                match quotas.reserve(&tenant, &request, tokens).await? {
                    ReserveOutcome::Reserved(_) => {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        refusals_in_a_row = 0;
                        open.push((request, amount));
                    }
                    ReserveOutcome::Refused(_) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        refusals_in_a_row += 1;
                    }
                }
                // Settle about half of what is open as we go, the rest at the end.
                if open.len() > 1 && rand::rng().random_bool(0.5) {
                    let (request, amount) = open.swap_remove(0);
                    settle(&quotas, &tenant, &request, amount, &charged).await?;
                }
            }
            for (request, amount) in open {
                settle(&quotas, &tenant, &request, amount, &charged).await?;
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await.context("oversell worker panicked")??;
    }
    hot.return_chunks().await?;
    let usage = quotas.usage(&tenant).await?;
    let plan = usage.buckets.iter().find(|b| b.id == "plan").context("plan bucket")?;
    let charged = charged.load(Ordering::Relaxed);
    let oversold = charged.max(plan.used + plan.reserved).saturating_sub(quota);
    let ledger_ok = plan.used == charged && plan.reserved == 0 && usage.leases == 0;
    let markers = super::markers::measure(redis, keys, MARKERS_PER_WINDOW).await?;

    Ok(Report {
        concurrency: args.concurrency,
        seconds: args.seconds,
        baseline_ops,
        pair_ops,
        pair_ratio: if baseline_ops > 0.0 { pair_ops / baseline_ops } else { 0.0 },
        pair_single_ops,
        pair_single_ratio: if baseline_ops > 0.0 { pair_single_ops / baseline_ops } else { 0.0 },
        redis_us_per_pair: pair_spent.script_us_per(pairs_made),
        redis_us_per_pair_single: single_spent.script_us_per(single_pairs_made),
        chunk_pair_ops,
        chunk_pair_ratio: if pair_ops > 0.0 { chunk_pair_ops / pair_ops } else { 0.0 },
        redis_us_per_pair_chunk: chunk_spent.script_us_per(chunk_pairs_made),
        grants: GRANTS,
        grants_pair_ops,
        grants_chunk_pair_ops,
        grants_chunk_ratio: if grants_pair_ops > 0.0 { grants_chunk_pair_ops / grants_pair_ops } else { 0.0 },
        redis_us_per_pair_grants: grants_spent.script_us_per(grants_made),
        redis_us_per_pair_grants_chunk: grants_chunk_spent.script_us_per(grants_chunk_made),
        redis_cpu_us_per_pair: pair_spent.cpu_us_per(pairs_made),
        redis_command_us_per_pair: pair_spent.command_us_per(pairs_made),
        redis_command_us_per_pair_single: single_spent.command_us_per(single_pairs_made),
        ops_per_script_call: if pair_spent.script_calls > 0.0 {
            2.0 * pairs_made as f64 / pair_spent.script_calls
        } else {
            0.0
        },
        oversell_quota: quota,
        oversell_admitted: admitted.load(Ordering::Relaxed),
        oversell_refused: refused.load(Ordering::Relaxed),
        oversold,
        ledger_ok,
        markers,
    })
}

/// A second client on the same keys that serves `tenant`'s reserves from chunks.
fn hot_client(redis: &RedisHandle, keys: &Keys, tenant: &TenantId) -> Quotas {
    let hot = Quotas::new(redis.clone(), keys.clone());
    hot.remember(tenant, 1, FallbackPolicy::FailClosed);
    let lease = Duration::from_secs(30);
    hot.set_chunks(Some(ChunkSettings::new("bench", 0, [tenant.clone()].into_iter().collect(), lease)));
    hot
}

async fn settle(
    quotas: &Quotas,
    tenant: &TenantId,
    request: &RequestId,
    reserved: u64,
    charged: &AtomicU64,
) -> anyhow::Result<()> {
    let actual = rand::rng().random_range(0..=reserved);
    let count = TokenCount::parse("actual_tokens", actual as i128).expect("valid");
    match quotas.settle(tenant, request, count, false).await? {
        SettleOutcome::Settled { .. } => {
            charged.fetch_add(actual, Ordering::Relaxed);
            Ok(())
        }
        other => anyhow::bail!("settle of {request} answered {other:?}"),
    }
}

/// Operations per second of `op` run by `concurrency` workers back to back for `duration`,
/// and how many were made.
async fn throughput<F, Fut>(concurrency: u32, duration: Duration, op: F) -> anyhow::Result<(f64, u64)>
where
    F: Fn(u32, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while started.elapsed() < duration {
                op(worker, done).await?;
                done += 1;
            }
            anyhow::Ok(done)
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += worker.await.context("benchmark worker panicked")??;
    }
    Ok((total as f64 / started.elapsed().as_secs_f64(), total))
}

/// The report as a table for people.
pub fn render(report: &Report) -> String {
    format!(
        "quota bench: {} in flight, {} s per phase\n\
         baseline EVALSHA        {:>10.0} ops/s\n\
         reserve+settle pairs    {:>10.0} pairs/s   ratio {:.3} (coalesced; target >= 0.4)\n\
         the same, one call each {:>10.0} pairs/s   ratio {:.3} (ceiling 0.5)\n\
         a hot tenant (chunks)   {:>10.0} pairs/s   {:.2}x the coalesced pairs; {:.2} µs of scripts per pair\n\
         {} grants, exactly      {:>10.0} pairs/s   {:.2} µs of scripts per pair\n\
         {} grants, from chunks  {:>10.0} pairs/s   {:.2}x exactly; {:.2} µs of scripts per pair\n\
         oversell run            quota {}  admitted {}  refused {}  oversold {}  ledger {}\n\
         redis per pair          {:.2} µs of scripts coalesced, {:.2} µs one call each (target <= 15); \
         main-thread CPU {:.2} µs; {:.1} operations per script call\n\
         of which commands       {:.2} µs coalesced, {:.2} µs one call each (the rest is the scripts' Lua)\n\
         done markers            {:.1} bytes per finished request ({:.1} in a tenant's first window; \
         a key per request: {:.1}); {} windows held\n",
        report.concurrency,
        report.seconds,
        report.baseline_ops,
        report.pair_ops,
        report.pair_ratio,
        report.pair_single_ops,
        report.pair_single_ratio,
        report.chunk_pair_ops,
        report.chunk_pair_ratio,
        report.redis_us_per_pair_chunk,
        report.grants,
        report.grants_pair_ops,
        report.redis_us_per_pair_grants,
        report.grants,
        report.grants_chunk_pair_ops,
        report.grants_chunk_ratio,
        report.redis_us_per_pair_grants_chunk,
        report.oversell_quota,
        report.oversell_admitted,
        report.oversell_refused,
        report.oversold,
        if report.ledger_ok { "ok" } else { "MISMATCH" },
        report.redis_us_per_pair,
        report.redis_us_per_pair_single,
        report.redis_cpu_us_per_pair,
        report.ops_per_script_call,
        report.redis_command_us_per_pair,
        report.redis_command_us_per_pair_single,
        report.markers.marker_bytes_per_request,
        report.markers.marker_bytes_per_request_first_window,
        report.markers.legacy_marker_bytes_per_request,
        report.markers.windows_held,
    )
}
