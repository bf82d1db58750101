//! `tessera bench draw`: what a draw costs through the `client` and through HTTP, against
//! a raw `LPOP` at the same concurrency, with the refiller running in-process.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use client::pool::{DrawSource, PoolName, PoolSnapshot};
use serde::Serialize;

use crate::cli::BenchQuotaArgs;
use crate::configuration::Settings;
use crate::startup::{Application, Signals};

/// The figures `--json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub concurrency: u32,
    pub seconds: u64,
    /// Raw `LPOP` of a long list, per second.
    pub baseline_ops: f64,
    pub baseline_p50_us: f64,
    pub baseline_p99_us: f64,
    /// `Pools::draw` per second (concurrent draws coalesced: up to 64 share one
    /// `EVALSHA`), and latency.
    pub client_ops: f64,
    pub client_p50_us: f64,
    pub client_p99_us: f64,
    /// The same with one shared call of the pool in flight at a time (the client waits for
    /// a call's reply before sending the next; the default lets two go at once).
    pub client_one_lane_ops: f64,
    pub client_one_lane_ratio: f64,
    /// Draws per shared call, with the default lanes and with one.
    pub draws_per_call: f64,
    pub draws_per_call_one_lane: f64,
    /// CPU of this process (user + system, every thread, the in-process refiller included)
    /// per coalesced draw, per draw with one lane, and per raw `LPOP`.
    pub client_cpu_us_per_draw: f64,
    pub client_cpu_us_per_draw_one_lane: f64,
    pub client_cpu_us_per_lpop: f64,
    /// The same with coalescing off: one `EVALSHA` per draw.
    pub client_single_ops: f64,
    pub client_single_p99_us: f64,
    pub client_single_ratio: f64,
    /// `POST /api/v1/pools/{pool}/draw` per second through an in-process server.
    pub http_ops: f64,
    pub http_p50_us: f64,
    pub http_p99_us: f64,
    pub client_ratio: f64,
    pub http_ratio: f64,
    /// `GET /healthz` per second through the same server and HTTP client: what any request
    /// costs on this machine, the ceiling of `http_ops`.
    pub healthz_ops: f64,
    pub healthz_ratio: f64,
    /// Client draws not served from Redis (the list and the standby batch were empty).
    pub client_not_from_redis: u64,
    /// Batches the refiller added during the run.
    pub batches_added: u64,
    /// Redis time per coalesced client draw: the `usec` of script calls in `INFO
    /// commandstats` (the draws' and the refiller's), summed over every primary.
    pub redis_us_per_draw: f64,
    /// The same with one script call per draw.
    pub redis_us_per_draw_single: f64,
    /// Main-thread CPU of Redis per coalesced draw (`INFO cpu`: commands, parsing, replies).
    pub redis_cpu_us_per_draw: f64,
    /// Main-thread CPU of Redis per raw `LPOP` of the baseline.
    pub redis_cpu_us_per_lpop: f64,
    /// Client draws per second with ticket leases (up to 256 tickets taken ahead, held
    /// 100 ms), and against the baseline.
    pub leased_ops: f64,
    pub leased_ratio: f64,
    pub leased_p99_us: f64,
    /// The share of those draws served from a lease (from memory).
    pub leased_from_memory: f64,
    /// Redis time per draw with leases (`INFO commandstats`, as `redis_us_per_draw`).
    pub redis_us_per_draw_leased: f64,
    /// Client draws per second, coalesced, with the pool's draw log on (every other phase
    /// runs with it off), and the Redis time per draw then (the log's stream entry is
    /// written inside the script); the same with one script call per draw.
    pub logged_ops: f64,
    pub redis_us_per_draw_logged: f64,
    pub logged_single_ops: f64,
    pub redis_us_per_draw_single_logged: f64,
    /// Leased tickets given back after the phase (none may be lost).
    pub leased_returned: u64,
    /// The slowest script call Redis ran during the whole run (its slow log, every primary),
    /// in ms; 0 when none took over 0.1 ms; `None` when Redis refused `CONFIG` (managed).
    pub redis_max_script_ms: Option<f64>,
}

/// The benchmark pool's batch size (its low-water is half of it).
const BENCH_BATCH: u32 = 16_384;

struct Phase {
    ops: f64,
    latencies: Vec<Duration>,
}

/// Runs the benchmark against the configured Redis and Postgres.
pub async fn run(settings: &Settings, args: &BenchQuotaArgs) -> anyhow::Result<Report> {
    let mut settings = settings.clone();
    settings.redis_prefix = super::run_prefix("draw");
    settings.bind = "127.0.0.1:0".parse().expect("valid address");
    crate::store::create_database_if_missing(&settings).await?;
    let application = Application::build(&settings, Signals::Ignore).await?;
    let state = application.state().clone();
    let address = format!("http://127.0.0.1:{}", application.port());
    let handle = application.handle();
    let server = tokio::spawn(application.run_until_stopped());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let refiller = tokio::spawn(crate::jobs::pool_refill::listen(state.clone(), None, stopped));

    let result = measure(&state, &address, args).await;

    let _ = stop.send(true);
    let _ = refiller.await;
    handle.stop(true).await;
    let _ = server.await;
    let cleanup = super::remove_keys(&state.redis, &state.keys).await;
    let report = result?;
    cleanup.context("removing the benchmark's keys")?;
    Ok(report)
}

async fn measure(state: &crate::state::AppState, address: &str, args: &BenchQuotaArgs) -> anyhow::Result<Report> {
    let duration = Duration::from_secs(args.seconds);
    let pool = PoolName::parse("bench").expect("valid");
    let snapshot = PoolSnapshot {
        version: 1,
        kind: Default::default(),
        weights: engine::Weights::from_integers([("ALIPAY_A", 45u64), ("WECHAT_B", 30), ("UNION_C", 25)])?,
        tiers: Default::default(),
        // Sized for the rate measured: tens of thousands of draws a second empty a batch of
        // 1,024 above a low-water of 128 in milliseconds, faster than the refiller answers,
        // and the draws fall to the local pool (the figure `client_not_from_redis`).
        batch_size: BENCH_BATCH,
        low_water: BENCH_BATCH / 2,
        ordering: engine::Ordering::Smooth,
        timezone: "UTC".into(),
        peak_windows: Vec::new(),
        caps: Default::default(),
        eject_rebuild_percent: 50,
        ejected: Default::default(),
        window_caps: None,
        draw_log: false,
    };
    state.pool_admin.publish(&pool, &snapshot).await?;
    state.pool_admin.refill(&pool).await?;
    let mut conn = state.redis.connection().await?;

    // Baseline: LPOP of a list long enough for the whole phase.
    let raw = format!("{}:bench-raw", state.keys.prefix());
    let mut pipe = redis::pipe();
    for _ in 0..200 {
        pipe.cmd("RPUSH").arg(&raw).arg(vec!["ALIPAY_A"; 10_000]).ignore();
    }
    pipe.query_async::<()>(&mut conn).await.context("filling the baseline list")?;
    let slow_scripts = super::spent::SlowScripts::start(&state.redis).await;
    let spent_before = super::spent::read(&state.redis).await?;
    let cpu_before_baseline = super::process_cpu_us();
    let baseline = phase(args.concurrency, duration, {
        let (conn, raw) = (conn.clone(), raw.clone());
        move || {
            let (mut conn, raw) = (conn.clone(), raw.clone());
            async move {
                let _: Option<String> = redis::cmd("LPOP").arg(&raw).query_async(&mut conn).await?;
                Ok(())
            }
        }
    })
    .await?;
    let cpu_baseline = super::process_cpu_us();
    let spent_baseline = super::spent::read(&state.redis).await?;
    let lpop_spent = spent_baseline.since(spent_before);

    let refills_before = added(state, &pool);
    let not_from_redis = Arc::new(AtomicU64::new(0));
    // A client draw, counting those not served by Redis.
    let draws = {
        let (pools, pool, not_from_redis) = (state.pools.clone(), pool.clone(), not_from_redis.clone());
        move || {
            let (pools, pool, not_from_redis) = (pools.clone(), pool.clone(), not_from_redis.clone());
            async move {
                let draw = pools.draw(&pool).await?;
                if draw.source != DrawSource::Redis {
                    not_from_redis.fetch_add(1, AtomicOrdering::Relaxed);
                }
                Ok(())
            }
        }
    };
    let (calls_before, cpu_before) = (state.pools.shared_calls(), super::process_cpu_us());
    let client = phase(args.concurrency, duration, draws.clone()).await?;
    let (client_calls, client_cpu) =
        (state.pools.shared_calls() - calls_before, super::process_cpu_us().saturating_sub(cpu_before));
    let batches_added = added(state, &pool) - refills_before;
    let spent_client = super::spent::read(&state.redis).await?;
    let client_spent = spent_client.since(spent_baseline);

    // The same with one shared call in flight at a time.
    state.pools.set_draw_lanes(1);
    let (calls_before, cpu_before) = (state.pools.shared_calls(), super::process_cpu_us());
    let one_lane = phase(args.concurrency, duration, draws.clone()).await;
    state.pools.set_draw_lanes(client::pool::DEFAULT_DRAW_LANES);
    let one_lane = one_lane?;
    let (one_lane_calls, one_lane_cpu) =
        (state.pools.shared_calls() - calls_before, super::process_cpu_us().saturating_sub(cpu_before));
    let spent_client = super::spent::read(&state.redis).await?;

    // The same, one script call per draw.
    state.pools.set_coalescing(1);
    let single = phase(args.concurrency, duration, draws.clone()).await;
    state.pools.set_coalescing(client::pool::DEFAULT_COALESCE);
    let single = single?;
    let spent_single = super::spent::read(&state.redis).await?;
    let single_spent = spent_single.since(spent_client);

    // The same with ticket leases: most draws served from memory.
    let leased_before = state.pools.leased_draws();
    state.pools.set_ticket_leases(Some(client::pool::LeaseSettings { max: 256, hold: Duration::from_millis(100) }));
    let leased = phase(args.concurrency, duration, draws.clone()).await;
    state.pools.set_ticket_leases(None);
    let leased_returned = state.pools.return_leases().await.context("returning the leased tickets")?;
    let leased = leased?;
    let leased_spent = super::spent::read(&state.redis).await?.since(spent_single);
    let from_memory = (state.pools.leased_draws() - leased_before) as f64 / leased.latencies.len().max(1) as f64;

    // The draw log's share: the same pool with its draw log on (one stream entry per script
    // call, inside the script, so its cost is in the scripts' time), coalesced and single.
    // Every other phase runs with it off.
    let logged_snapshot = PoolSnapshot { version: 2, draw_log: true, ..snapshot.clone() };
    state.pool_admin.publish(&pool, &logged_snapshot).await?;
    state.pool_admin.refill(&pool).await?;
    let spent_logged_before = super::spent::read(&state.redis).await?;
    let logged = phase(args.concurrency, duration, draws.clone()).await?;
    let spent_logged = super::spent::read(&state.redis).await?;
    let logged_spent = spent_logged.since(spent_logged_before);
    state.pools.set_coalescing(1);
    let logged_single = phase(args.concurrency, duration, draws.clone()).await;
    state.pools.set_coalescing(client::pool::DEFAULT_COALESCE);
    let logged_single = logged_single?;
    let logged_single_spent = super::spent::read(&state.redis).await?.since(spent_logged);

    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency as usize).build()?;
    let url = format!("{address}/api/v1/pools/bench/draw");
    // A data-plane token, as an application would send (revoked when the phase is done).
    let mut conn = state.db.acquire().await?;
    let bound = api::access::TokenBindings { pools: vec!["bench".into()], ..Default::default() };
    let token = crate::access::create_token(&mut conn, "bench draw", crate::access::Scope::Dataplane, &bound, "bench")
        .await
        .map_err(|e| anyhow::anyhow!("creating the benchmark's API token: {e}"))?;
    drop(conn);
    let (token_id, secret) = (token.id, token.token);
    let over_http = phase(args.concurrency, duration, move || {
        let (http, url, secret) = (http.clone(), url.clone(), secret.clone());
        async move {
            let response = http.post(&url).bearer_auth(&secret).send().await?;
            anyhow::ensure!(response.status().is_success(), "draw over http answered {}", response.status());
            response.bytes().await?;
            Ok(())
        }
    })
    .await?;
    crate::access::store::revoke_token(&mut *state.db.acquire().await?, token_id).await?;

    let health = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency as usize).build()?;
    let url = format!("{address}/healthz");
    let healthz = phase(args.concurrency, duration, move || {
        let (http, url) = (health.clone(), url.clone());
        async move {
            let response = http.get(&url).send().await?;
            anyhow::ensure!(response.status().is_success(), "/healthz answered {}", response.status());
            response.bytes().await?;
            Ok(())
        }
    })
    .await?;

    let redis_max_script_ms = match slow_scripts {
        Some(watch) => Some(watch.finish(&state.redis).await?),
        None => None,
    };
    let q = super::quantile_us;
    Ok(Report {
        redis_max_script_ms,
        concurrency: args.concurrency,
        seconds: args.seconds,
        baseline_ops: baseline.ops,
        baseline_p50_us: q(&baseline.latencies, 0.5),
        baseline_p99_us: q(&baseline.latencies, 0.99),
        client_ops: client.ops,
        client_p50_us: q(&client.latencies, 0.5),
        client_p99_us: q(&client.latencies, 0.99),
        client_one_lane_ops: one_lane.ops,
        client_one_lane_ratio: one_lane.ops / baseline.ops,
        draws_per_call: client.latencies.len() as f64 / client_calls.max(1) as f64,
        draws_per_call_one_lane: one_lane.latencies.len() as f64 / one_lane_calls.max(1) as f64,
        client_cpu_us_per_draw: client_cpu as f64 / client.latencies.len().max(1) as f64,
        client_cpu_us_per_draw_one_lane: one_lane_cpu as f64 / one_lane.latencies.len().max(1) as f64,
        client_cpu_us_per_lpop: cpu_baseline.saturating_sub(cpu_before_baseline) as f64
            / baseline.latencies.len().max(1) as f64,
        client_single_ops: single.ops,
        client_single_p99_us: q(&single.latencies, 0.99),
        client_single_ratio: single.ops / baseline.ops,
        http_ops: over_http.ops,
        http_p50_us: q(&over_http.latencies, 0.5),
        http_p99_us: q(&over_http.latencies, 0.99),
        client_ratio: client.ops / baseline.ops,
        http_ratio: over_http.ops / baseline.ops,
        healthz_ops: healthz.ops,
        healthz_ratio: healthz.ops / baseline.ops,
        client_not_from_redis: not_from_redis.load(AtomicOrdering::Relaxed),
        batches_added,
        redis_us_per_draw: client_spent.script_us_per(client.latencies.len() as u64),
        redis_us_per_draw_single: single_spent.script_us_per(single.latencies.len() as u64),
        redis_cpu_us_per_draw: client_spent.cpu_us_per(client.latencies.len() as u64),
        redis_cpu_us_per_lpop: lpop_spent.cpu_us_per(baseline.latencies.len() as u64),
        leased_ops: leased.ops,
        leased_ratio: leased.ops / baseline.ops,
        leased_p99_us: q(&leased.latencies, 0.99),
        leased_from_memory: from_memory,
        redis_us_per_draw_leased: leased_spent.script_us_per(leased.latencies.len() as u64),
        logged_ops: logged.ops,
        redis_us_per_draw_logged: logged_spent.script_us_per(logged.latencies.len() as u64),
        logged_single_ops: logged_single.ops,
        redis_us_per_draw_single_logged: logged_single_spent.script_us_per(logged_single.latencies.len() as u64),
        leased_returned: leased_returned as u64,
    })
}

fn added(state: &crate::state::AppState, pool: &PoolName) -> u64 {
    ["append", "standby", "replace"]
        .iter()
        .map(|mode| state.metrics.pool_refills.with_label_values(&[pool.as_str(), mode]).get())
        .sum()
}

/// Runs `op` back to back on `concurrency` workers for `duration`: throughput and every
/// operation's latency, sorted.
async fn phase<F, Fut>(concurrency: u32, duration: Duration, op: F) -> anyhow::Result<Phase>
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while started.elapsed() < duration {
                let t = Instant::now();
                op().await?;
                latencies.push(t.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.context("benchmark worker panicked")??);
    }
    let ops = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok(Phase { ops, latencies })
}

/// The report as a table for people.
pub fn render(r: &Report) -> String {
    let row = |name: &str, ops: f64, p50: f64, p99: f64, ratio: f64| {
        format!("{name:<26} {ops:>10.0} {p50:>10.0} {p99:>10.0} {ratio:>8.3}\n")
    };
    let mut out = format!(
        "draw bench: {} in flight, {} s per phase (refiller in-process)\n{:<26} {:>10} {:>10} {:>10} {:>8}\n",
        r.concurrency, r.seconds, "", "ops/s", "p50 µs", "p99 µs", "ratio"
    );
    out.push_str(&row("raw LPOP (baseline)", r.baseline_ops, r.baseline_p50_us, r.baseline_p99_us, 1.0));
    out.push_str(&row("client draw (coalesced)", r.client_ops, r.client_p50_us, r.client_p99_us, r.client_ratio));
    out.push_str(&format!(
        "{:<26} {:>10.0} {:>10} {:>10} {:>8.3}\n",
        "client draw (one lane)", r.client_one_lane_ops, "", "", r.client_one_lane_ratio
    ));
    out.push_str(&format!(
        "{:<26} {:>10.0} {:>10} {:>10.0} {:>8.3}\n",
        "client draw (one call each)", r.client_single_ops, "", r.client_single_p99_us, r.client_single_ratio
    ));
    out.push_str(&format!(
        "{:<26} {:>10.0} {:>10} {:>10.0} {:>8.3}\n",
        "client draw (ticket leases)", r.leased_ops, "", r.leased_p99_us, r.leased_ratio
    ));
    out.push_str(&row("HTTP draw", r.http_ops, r.http_p50_us, r.http_p99_us, r.http_ratio));
    out.push_str(&format!(
        "{:<26} {:>10.0} {:>10} {:>10} {:>8.3}\n",
        "HTTP GET /healthz (ceiling)", r.healthz_ops, "", "", r.healthz_ratio
    ));
    out.push_str(&format!(
        "client draws not from redis: {}   batches added: {}\n",
        r.client_not_from_redis, r.batches_added
    ));
    out.push_str(&format!(
        "draws per shared call: {:.1} ({:.1} with one lane); client CPU {:.2} µs per draw ({:.2} with one lane), \
         {:.2} µs per raw LPOP\n",
        r.draws_per_call,
        r.draws_per_call_one_lane,
        r.client_cpu_us_per_draw,
        r.client_cpu_us_per_draw_one_lane,
        r.client_cpu_us_per_lpop
    ));
    out.push_str(&format!(
        "redis per draw: {:.2} µs of scripts coalesced, {:.2} µs one call each (target <= 3); \
         main-thread CPU {:.2} µs per draw, {:.2} µs per raw LPOP\n",
        r.redis_us_per_draw, r.redis_us_per_draw_single, r.redis_cpu_us_per_draw, r.redis_cpu_us_per_lpop
    ));
    out.push_str(&format!(
        "ticket leases: {:.1}% of draws from memory, {:.2} µs of scripts per draw, {} tickets returned\n",
        r.leased_from_memory * 100.0,
        r.redis_us_per_draw_leased,
        r.leased_returned
    ));
    out.push_str(&format!(
        "draw log on: {:.0} draws/s coalesced, {:.2} µs of scripts per draw; {:.0} draws/s one call each, {:.2} µs\n",
        r.logged_ops, r.redis_us_per_draw_logged, r.logged_single_ops, r.redis_us_per_draw_single_logged
    ));
    out.push_str(&match r.redis_max_script_ms {
        Some(ms) => format!("slowest script call in Redis: {ms:.3} ms (target <= 1; 0: none over 0.1 ms)\n"),
        None => "slowest script call in Redis: unknown (CONFIG refused)\n".to_owned(),
    });
    out
}
