//! `tessera bench recover`: how long after Redis lost every key of the deployment all pools
//! and quotas are served again, and whether any configuration was lost (design.md §2: "If
//! Redis loses everything, the control plane republishes every snapshot and rebuilds every
//! pool on its own, within seconds").
//!
//! An in-process server with its scheduler runs on a database of its own (created and
//! dropped) and a key prefix of its own. Workers draw from every pool and reserve+settle for
//! every tenant; then every key under the prefix is removed at once — SCAN, then one
//! MULTI/EXEC of UNLINKs: what a FLUSHALL does to this deployment, without a FLUSHALL (the
//! Redis is shared). `recover_ms` runs from the wipe until every pool has served a draw from
//! Redis and every tenant has had a reservation admitted by Redis, each counted only for
//! operations started after the wipe; then every meta hash version is compared with
//! Postgres's newest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use client::pool::{DrawSource, PoolError, PoolName};
use client::quota::{QuotaError, RequestId, ReserveOutcome, TenantId, TokenCount, Tokens};
use serde::Serialize;
use serde_json::{json, Value};
use tracing::instrument::WithSubscriber;

use crate::change::Entity;
use crate::cli::BenchRecoverArgs;
use crate::configuration::Settings;
use crate::state::AppState;

/// The figures `--json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Pools and tenants configured (the demo seed plus copies).
    pub pools: u32,
    pub tenants: u32,
    /// Workers drawing and reserving throughout.
    pub concurrency: u32,
    /// Draws + reserve/settle pairs per second before the wipe.
    pub ops_before: f64,
    /// Keys removed by the wipe.
    pub keys_wiped: u64,
    /// From the wipe until every pool and every tenant was served by Redis again.
    pub recover_ms: f64,
    /// The same, for the pools alone and the tenants alone.
    pub pools_recover_ms: f64,
    pub tenants_recover_ms: f64,
    /// Operations refused after the wipe until recovery: draws from an unknown pool (or a
    /// tiers pool whose channel lists are still being rebuilt), reserves refused by a
    /// tenant's fallback policy while its snapshot is republished (or for a tenant this
    /// process never saw).
    pub refused_while_recovering: u64,
    /// Other errors after the wipe (none expected), and the first few of them.
    pub errors_while_recovering: u64,
    pub error_samples: Vec<String>,
    /// Published entities (pools and tenants) compared with Postgres after recovery.
    pub entities: u32,
    /// Every meta hash holds Postgres's newest version: no configuration was lost.
    pub versions_match: bool,
    /// `entity: redis vX, postgres vY` for each that does not.
    pub mismatched: Vec<String>,
    /// Tokens callers were told were settled (or queued) that Redis does not count once
    /// healed, and tokens it counts beyond them (all tenants).
    pub quota_tokens_lost: u64,
    pub quota_tokens_extra: u64,
    /// Tokens a tenant on a 20,000-token plan was told were settled beyond its plan.
    pub oversold: u64,
    /// From the wipe until every tenant's count equalled what callers were told (none:
    /// not within the timeout).
    pub healed_ms: Option<f64>,
}

/// Runs the benchmark; removes its database and keys afterwards.
pub async fn run(settings: &Settings, args: &BenchRecoverArgs) -> anyhow::Result<Report> {
    super::on_own_server(
        settings,
        "recover",
        true,
        |_| {},
        |s| async move { measure(&s.state, &s.address, &s.token, args).await },
    )
    .await
}

/// The pools and tenants the load runs over.
struct Targets {
    pools: Vec<PoolName>,
    tenants: Vec<TenantId>,
}

/// Configures the demo seed plus copies (through the admin API at `address`, with `token`),
/// waits until Redis serves all of it, puts it under load, wipes the prefix and measures the
/// recovery. Needs the scheduler running beside `state` (the reconcile job is what recovers).
pub async fn measure(state: &AppState, address: &str, token: &str, args: &BenchRecoverArgs) -> anyhow::Result<Report> {
    let targets = configure(state, address, token, args).await?;
    let deadline = Duration::from_secs(args.timeout);
    wait_until_served(state, &targets, deadline).await.context("before the wipe")?;

    let tracker = Arc::new(Tracker::new(&targets));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let targets = Arc::new(targets);
    let mut workers = Vec::new();
    for worker in 0..args.concurrency {
        // The refusals after the wipe are expected and counted in the report; the client
        // would log each one as an error.
        let quiet = tracing::subscriber::NoSubscriber::default();
        let worker =
            load(state.clone(), targets.clone(), tracker.clone(), worker, stopped.clone()).with_subscriber(quiet);
        workers.push(tokio::spawn(worker));
    }

    let loaded = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let ops_before = tracker.ops.load(Ordering::Relaxed) as f64 / loaded.elapsed().as_secs_f64();
    // Set first: the wipe takes effect in Redis before its reply reaches this process.
    tracker.wipe_started.store(true, Ordering::Release);
    let keys_wiped = wipe(state).await.context("wiping the prefix")?;
    let wiped_at = Instant::now();
    *tracker.wiped_at.lock().expect("tracker lock") = Some(wiped_at);

    let outcome = loop {
        if let Some(done) = tracker.recovered(wiped_at) {
            break Ok(done);
        }
        if wiped_at.elapsed() > deadline {
            break Err(anyhow::anyhow!(
                "not served again within {} s of the wipe: {}",
                args.timeout,
                tracker.missing().join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let _ = stop.send(true);
    for worker in workers {
        worker.await.context("load worker panicked")?;
    }
    let (pools_recover, tenants_recover) = outcome?;

    let healed = super::recover_quota::heal(state, &tracker.told, wiped_at, deadline).await?;
    let (entities, mismatched) = compare_versions(state).await?;
    let error_samples = tracker.error_samples.lock().expect("tracker lock").clone();
    Ok(Report {
        pools: targets.pools.len() as u32,
        tenants: targets.tenants.len() as u32,
        concurrency: args.concurrency,
        ops_before,
        keys_wiped,
        recover_ms: ms(pools_recover.max(tenants_recover)),
        pools_recover_ms: ms(pools_recover),
        tenants_recover_ms: ms(tenants_recover),
        refused_while_recovering: tracker.refused.load(Ordering::Relaxed),
        errors_while_recovering: tracker.errors.load(Ordering::Relaxed),
        error_samples,
        entities,
        versions_match: mismatched.is_empty(),
        mismatched,
        quota_tokens_lost: healed.lost,
        quota_tokens_extra: healed.extra,
        oversold: healed.oversold,
        healed_ms: healed.healed_ms,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The demo seed, then copies of its pools (alternately the channels and the tiers pool)
/// and of its tenant up to `--pools` and `--tenants`, each an audited change made over HTTP.
async fn configure(state: &AppState, address: &str, token: &str, args: &BenchRecoverArgs) -> anyhow::Result<Targets> {
    crate::seed::demo_seed(&state.db).await.context("seeding the demo configuration")?;
    let http = reqwest::Client::new();
    let read = |path: String| {
        let http = http.clone();
        async move {
            let response = http.get(format!("{address}{path}")).bearer_auth(token).send().await?;
            anyhow::ensure!(response.status().is_success(), "GET {path}: {}", response.status());
            Ok::<Value, anyhow::Error>(response.json().await?)
        }
    };
    let put = |path: String, body: Value| {
        let http = http.clone();
        async move {
            let response = http.put(format!("{address}{path}")).bearer_auth(token).json(&body).send().await?;
            anyhow::ensure!(
                response.status().is_success(),
                "PUT {path}: {} {}",
                response.status(),
                response.text().await?
            );
            Ok::<_, anyhow::Error>(())
        }
    };
    let configured = published_entities(state).await?;
    let bodies = [read("/api/v1/pools/cn-pay".into()).await?, read("/api/v1/pools/sea-pay".into()).await?];
    for i in configured.pools.len()..args.pools as usize {
        let name = format!("{}-{i}", ["cn-pay", "sea-pay"][i % 2]);
        let body = json!({"snapshot": bodies[i % 2]["snapshot"], "expected_version": 0, "reason": "bench recover"});
        put(format!("/api/v1/pools/{name}"), body).await?;
    }
    let acme = read("/api/v1/tenants/acme".into()).await?;
    for i in configured.tenants.len()..args.tenants as usize {
        let body = json!({"plan": acme["plan"], "expected_version": 0, "reason": "bench recover"});
        put(format!("/api/v1/tenants/acme-{i}"), body).await?;
    }
    if !configured.tenants.iter().any(|t| t.as_str() == super::recover_quota::CAPPED_TENANT) {
        super::recover_quota::configure(&http, address, token).await?;
    }
    // The seed's own outbox rows: delivered now, as `demo-seed` does.
    crate::publish::drain_outbox(state).await.context("publishing the seed")?;
    published_entities(state).await
}

/// Every pool and tenant with a snapshot in Postgres.
async fn published_entities(state: &AppState) -> anyhow::Result<Targets> {
    let entities: Vec<String> =
        crate::change::store::entities(&state.db).await.context("listing the configured entities")?;
    let mut targets = Targets { pools: Vec::new(), tenants: Vec::new() };
    for entity in entities {
        match Entity::parse(&entity)? {
            Entity::Pool(pool) => targets.pools.push(pool),
            Entity::Tenant(tenant) => targets.tenants.push(tenant),
            // A route is served from each instance's memory: nothing to wait for.
            Entity::Route(_) => {}
        }
    }
    Ok(targets)
}

/// Waits until every pool answers a draw and every tenant its usage from Redis.
async fn wait_until_served(state: &AppState, targets: &Targets, deadline: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let mut missing = Vec::new();
        for pool in &targets.pools {
            if !matches!(state.pools.draw(pool).await, Ok(d) if d.source == DrawSource::Redis) {
                missing.push(format!("pool {pool}"));
            }
        }
        for tenant in &targets.tenants {
            if state.quotas.usage(tenant).await.is_err() {
                missing.push(format!("tenant {tenant}"));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < deadline, "not served: {}", missing.join(", "));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the workers saw: operations, and the first success of each pool and tenant among
/// the operations started after the wipe.
struct Tracker {
    ops: AtomicU64,
    told: super::recover_quota::Told,
    refused: AtomicU64,
    errors: AtomicU64,
    error_samples: Mutex<Vec<String>>,
    wiped_at: Mutex<Option<Instant>>,
    /// The wipe was sent (it may have taken effect before `wiped_at` is set).
    wipe_started: std::sync::atomic::AtomicBool,
    pools: Mutex<BTreeMap<PoolName, Option<Instant>>>,
    tenants: Mutex<BTreeMap<TenantId, Option<Instant>>>,
}

impl Tracker {
    fn new(targets: &Targets) -> Self {
        Self {
            ops: AtomicU64::new(0),
            told: Default::default(),
            refused: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            error_samples: Mutex::new(Vec::new()),
            wiped_at: Mutex::new(None),
            wipe_started: Default::default(),
            pools: Mutex::new(targets.pools.iter().map(|p| (p.clone(), None)).collect()),
            tenants: Mutex::new(targets.tenants.iter().map(|t| (t.clone(), None)).collect()),
        }
    }

    /// Counts an unexpected error, keeping the first few distinct messages.
    fn error(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut samples = self.error_samples.lock().expect("tracker lock");
        if samples.len() < 5 && !samples.contains(&message) {
            samples.push(message);
        }
    }

    fn wiped(&self) -> bool {
        self.wiped_at.lock().expect("tracker lock").is_some()
    }

    /// Records the first time `key` was served.
    fn served<K: Ord>(map: &Mutex<BTreeMap<K, Option<Instant>>>, key: &K) {
        let now = Instant::now();
        if let Some(at @ None) = map.lock().expect("tracker lock").get_mut(key) {
            *at = Some(now);
        }
    }

    /// Whether `key` has been served since the wipe.
    fn was_served<K: Ord>(map: &Mutex<BTreeMap<K, Option<Instant>>>, key: &K) -> bool {
        map.lock().expect("tracker lock").get(key).is_some_and(Option::is_some)
    }

    /// When every pool and every tenant has been served again: how long after the wipe
    /// the last pool and the last tenant were.
    fn recovered(&self, wiped_at: Instant) -> Option<(Duration, Duration)> {
        Some((last_served(&self.pools, wiped_at)?, last_served(&self.tenants, wiped_at)?))
    }

    /// The pools and tenants not served again yet.
    fn missing(&self) -> Vec<String> {
        let pools = self.pools.lock().expect("tracker lock");
        let tenants = self.tenants.lock().expect("tracker lock");
        pools
            .iter()
            .filter(|(_, at)| at.is_none())
            .map(|(p, _)| format!("pool {p}"))
            .chain(tenants.iter().filter(|(_, at)| at.is_none()).map(|(t, _)| format!("tenant {t}")))
            .collect()
    }
}

/// How long after the wipe the last of `map` was served again; `None` while one was not.
fn last_served<K>(map: &Mutex<BTreeMap<K, Option<Instant>>>, wiped_at: Instant) -> Option<Duration> {
    let map = map.lock().expect("tracker lock");
    let mut latest = wiped_at;
    for at in map.values() {
        latest = latest.max((*at)?);
    }
    Some(latest - wiped_at)
}

/// One worker: a draw from the next pool, a reserve and a settle for the next tenant, over
/// and over until stopped.
async fn load(
    state: AppState,
    targets: Arc<Targets>,
    tracker: Arc<Tracker>,
    worker: u32,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let tokens = Tokens::parse("tokens", 100).expect("valid");
    let actual = TokenCount::parse("actual_tokens", 60).expect("valid");
    let mut i: u64 = 0;
    while !*stop.borrow() {
        i += 1;
        let pool = &targets.pools[(worker as usize + i as usize) % targets.pools.len()];
        let tenant = &targets.tenants[(worker as usize + i as usize) % targets.tenants.len()];
        // Only an operation that starts after the wipe can show recovery.
        let after_wipe = tracker.wiped();
        // Whether Redis served this pool again before this draw began: a draw sent earlier
        // may still answer from the rebuild (two calls of a pool are in flight at once, and
        // their replies may be handled in either order).
        let served_before = Tracker::was_served(&tracker.pools, pool);
        let mut failed = false;
        match state.pools.draw(pool).await {
            Ok(draw) if draw.source == DrawSource::Redis => {
                if after_wipe {
                    Tracker::served(&tracker.pools, pool);
                }
            }
            // Served by this process while the pool's list is being rebuilt: not yet Redis.
            Ok(_) => {}
            Err(PoolError::UnknownPool(_)) => {
                tracker.refused.fetch_add(1, Ordering::Relaxed);
                failed = true;
            }
            // A tiers pool being republished: its list of tiers is back, its tiers' lists
            // of channels not yet.
            Err(PoolError::Exhausted { .. }) if after_wipe && !served_before => {
                tracker.refused.fetch_add(1, Ordering::Relaxed);
                failed = true;
            }
            Err(e) => {
                tracker.error(format!("draw from {pool}: {e}"));
                failed = true;
            }
        }
        let request = RequestId::parse(&format!("r{worker}-{i}")).expect("valid");
        match state.quotas.reserve(tenant, &request, tokens).await {
            Ok(ReserveOutcome::Reserved(r)) => {
                if after_wipe && r.source == client::quota::Source::Redis {
                    Tracker::served(&tracker.tenants, tenant);
                }
                match state.quotas.settle(tenant, &request, actual, false).await {
                    Ok(outcome) => tracker.told.settled(tenant, actual.get(), &outcome),
                    // Reserved before the wipe, which took the reservation with it.
                    Err(QuotaError::UnknownTenant(_)) => {
                        tracker.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracker.error(format!("settle for {tenant}: {e}")),
                }
            }
            // A refusal by Redis (the small plan ran out) is Redis serving the tenant too.
            Ok(ReserveOutcome::Refused(r)) => {
                if after_wipe && r.dimension != client::quota::Dimension::FallbackAllowance {
                    Tracker::served(&tracker.tenants, tenant);
                }
            }
            // A tenant the wipe took away: its fallback policy (fail_closed) refuses while its
            // snapshot is republished; a tenant this process never saw is unknown.
            Err(QuotaError::UnknownTenant(_)) | Err(QuotaError::Unavailable { .. })
                if tracker.wipe_started.load(Ordering::Acquire) =>
            {
                tracker.refused.fetch_add(1, Ordering::Relaxed);
                failed = true;
            }
            Err(e) => {
                tracker.error(format!("reserve for {tenant}: {e}"));
                failed = true;
            }
        }
        if !after_wipe {
            tracker.ops.fetch_add(2, Ordering::Relaxed);
        }
        if failed {
            // Refusals come back at once: pause so the workers leave the recovery some CPU.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Removes every key under the prefix in one MULTI/EXEC, so no operation sees half a wipe
/// (on a cluster, where one transaction cannot span slots, one MULTI/EXEC per pool or
/// tenant, so none sees its entity half wiped); returns how many keys there were.
async fn wipe(state: &AppState) -> anyhow::Result<u64> {
    let mut conn = state.redis.connection().await?;
    if conn.is_cluster() {
        return Ok(conn.unlink_matching(&state.keys.scan_pattern()).await?);
    }
    let mut found = conn.keys_matching(&state.keys.scan_pattern()).await?;
    found.sort();
    found.dedup();
    let mut pipe = redis::pipe();
    pipe.atomic();
    for chunk in found.chunks(500) {
        pipe.cmd("UNLINK").arg(chunk).ignore();
    }
    pipe.query_async::<()>(&mut conn).await?;
    Ok(found.len() as u64)
}

/// Every published entity's newest version in Postgres against its meta hash in Redis:
/// how many were compared, and the ones that differ.
async fn compare_versions(state: &AppState) -> anyhow::Result<(u32, Vec<String>)> {
    let newest = crate::publish::store::newest_versions(&state.db).await.context("reading the newest versions")?;
    let mut conn = state.redis.connection().await?;
    let mut compared = 0;
    let mut mismatched = Vec::new();
    for (entity, version) in newest {
        let meta = match Entity::parse(&entity) {
            Ok(Entity::Pool(pool)) => state.keys.pool_meta(pool.as_str()),
            Ok(Entity::Tenant(tenant)) => state.keys.quota_meta(tenant.as_str()),
            Ok(Entity::Route(route)) => state.keys.route_meta(route.as_str()),
            Err(_) => continue,
        };
        compared += 1;
        let held: Option<i64> = redis::cmd("HGET").arg(&meta).arg("version").query_async(&mut conn).await?;
        if held != Some(version) {
            let held = held.map_or("none".to_owned(), |v| format!("v{v}"));
            mismatched.push(format!("{entity}: redis {held}, postgres v{version}"));
        }
    }
    Ok((compared, mismatched))
}

/// The report as a table for people.
pub fn render(r: &Report) -> String {
    format!(
        "recover bench: {} pools, {} tenants, {} workers drawing and reserving ({:.0} ops/s before)\n\
         wiped every key of the prefix ({} keys; SCAN + UNLINK, standing in for a FLUSHALL)\n\
         served again after {:.0} ms (pools {:.0} ms, tenants {:.0} ms)   (target < 5000 ms)\n\
         refused while recovering: {}   other errors: {}{}\n\
         config: {} of {} entities at Postgres's version{}\n\
         quota: quota_tokens_lost {} (extra {}), oversold {}, healed_ms {}\n",
        r.pools,
        r.tenants,
        r.concurrency,
        r.ops_before,
        r.keys_wiped,
        r.recover_ms,
        r.pools_recover_ms,
        r.tenants_recover_ms,
        r.refused_while_recovering,
        r.errors_while_recovering,
        if r.error_samples.is_empty() { String::new() } else { format!(" ({})", r.error_samples.join("; ")) },
        r.entities as usize - r.mismatched.len(),
        r.entities,
        if r.versions_match { " (none lost)".to_owned() } else { format!(": MISMATCH {}", r.mismatched.join("; ")) },
        r.quota_tokens_lost,
        r.quota_tokens_extra,
        r.oversold,
        r.healed_ms.map_or("not within the timeout".to_owned(), |ms| format!("{ms:.0}")),
    )
}
