//! `tessera simulate`: steady, realistic traffic through the `client` crate against the
//! configured Redis, so a fresh deployment's dashboard has something to show.
//!
//! Each simulated request draws a channel from one of the pools (as a payment router
//! would) and reserves tokens for one of the tenants (as an LLM gateway would); after a
//! simulated call of 50–1500 ms the reservation is settled with a realistic actual use
//! (30–110 % of the estimate, so some overdraw), or released (the call failed, 8 %), or
//! now and then left open for the sweeper to return after its deadline (at most one
//! every 30 s, so the tenant's concurrency is not eaten up by abandoned leases).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use client::pool::{DrawSource, PoolName, Pools};
use client::quota::{Quotas, ReleaseOutcome, RequestId, ReserveOutcome, SettleOutcome, TenantId, TokenCount, Tokens};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sqlx::PgPool;
use tokio::task::JoinSet;

use crate::state::AppState;

/// How often requests are issued (the rate is spread over these ticks).
const TICK: Duration = Duration::from_millis(10);
/// The most requests in flight; beyond it a request is skipped (and counted) rather than
/// queued, so a slow Redis does not build an ever-growing backlog.
const MAX_IN_FLIGHT: usize = 20_000;
/// How long requests still in flight get to finish after the run stops.
const DRAIN: Duration = Duration::from_secs(5);
/// Share of reservations released instead of settled (the simulated call failed).
const RELEASE_SHARE: f64 = 0.08;
/// Share of reservations that may be left to expire …
const ABANDON_SHARE: f64 = 0.02;
/// … but at most one per this interval.
const ABANDON_EVERY: Duration = Duration::from_secs(30);

/// Arguments of `tessera simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Simulated requests per second: each draws from one of the pools and reserves tokens
    /// for one of the tenants.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub rate: u32,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub seconds: Option<u64>,
    /// Draw from this pool only (repeatable; default: every pool with a snapshot).
    #[arg(long = "pool", value_name = "POOL", value_parser = parse_pool)]
    pub pools: Vec<PoolName>,
    /// Reserve for this tenant only (repeatable; default: every tenant with a snapshot).
    #[arg(long = "tenant", value_name = "TENANT", value_parser = parse_tenant)]
    pub tenants: Vec<TenantId>,
    /// Seconds between summary lines.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub report_every: u64,
    /// Also refill the pools from this process (when no `tessera serve` is running, the
    /// pools would otherwise run dry and draws fall back to local pools).
    #[arg(long)]
    pub refill: bool,
    /// Seed of the simulated traffic's choices (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Calls through this channel fail at this rate (0..=1), e.g. `--fail CANARY=0.3`, so a
    /// ramp's guard can be watched tripping (repeatable; others fail 1 % of the time).
    /// Every draw's call is reported as an outcome of its channel, with a latency.
    #[arg(long = "fail", value_name = "CHANNEL=RATE", value_parser = parse_fail)]
    pub fail: Vec<(String, f64)>,
}

/// The failure rate of a channel's simulated calls when `--fail` does not name it.
const BASE_FAILURE_RATE: f64 = 0.01;

fn parse_fail(raw: &str) -> Result<(String, f64), String> {
    let (code, rate) = raw.split_once('=').ok_or_else(|| format!("{raw:?}: expected CHANNEL=RATE, e.g. C=0.3"))?;
    let code = client::health::ChannelCode::parse(code.trim()).map_err(|e| format!("{}: {}", e.field, e.rule))?;
    let rate: f64 = rate.trim().parse().map_err(|_| format!("{raw:?}: the rate must be a number from 0 to 1"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!("{raw:?}: the rate must be from 0 to 1"));
    }
    Ok((code.as_str().to_owned(), rate))
}

fn parse_pool(raw: &str) -> Result<PoolName, String> {
    PoolName::parse(raw).map_err(|e| e.to_string())
}

fn parse_tenant(raw: &str) -> Result<TenantId, String> {
    TenantId::parse(raw).map_err(|e| e.to_string())
}

/// What a run did so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Seconds since the run started.
    pub seconds: f64,
    /// Draws served from Redis, from this process's local pool, from static weights.
    pub draws_redis: u64,
    pub draws_local: u64,
    pub draws_static: u64,
    pub draw_errors: u64,
    pub reserves_admitted: u64,
    pub reserves_refused: u64,
    /// Refusals by the limit that ran out (`tokens`, `requests`, `concurrency`, …).
    pub refused_by: BTreeMap<String, u64>,
    pub reserve_errors: u64,
    pub settled: u64,
    pub released: u64,
    /// Reservations left open for the sweeper.
    pub left_to_expire: u64,
    /// Settles and releases that failed.
    pub finish_errors: u64,
    /// Requests not issued because too many were in flight.
    pub skipped: u64,
    /// The last error, for the summary line.
    pub last_error: Option<String>,
}

impl Totals {
    /// Every draw, whatever served it.
    pub fn draws(&self) -> u64 {
        self.draws_redis + self.draws_local + self.draws_static
    }
}

#[derive(Default)]
struct Counters {
    draws_redis: AtomicU64,
    draws_local: AtomicU64,
    draws_static: AtomicU64,
    draw_errors: AtomicU64,
    reserves_admitted: AtomicU64,
    reserves_refused: AtomicU64,
    refused_by: Mutex<BTreeMap<&'static str, u64>>,
    reserve_errors: AtomicU64,
    settled: AtomicU64,
    released: AtomicU64,
    left_to_expire: AtomicU64,
    finish_errors: AtomicU64,
    skipped: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self, counter: &AtomicU64, what: &str, error: impl std::fmt::Display) {
        Self::add(counter);
        tracing::debug!(error = %error, "{what} failed");
        *self.last_error.lock().expect("last error lock") = Some(format!("{what}: {error}"));
    }

    fn totals(&self, started: Instant) -> Totals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Totals {
            seconds: started.elapsed().as_secs_f64(),
            draws_redis: get(&self.draws_redis),
            draws_local: get(&self.draws_local),
            draws_static: get(&self.draws_static),
            draw_errors: get(&self.draw_errors),
            reserves_admitted: get(&self.reserves_admitted),
            reserves_refused: get(&self.reserves_refused),
            refused_by: self
                .refused_by
                .lock()
                .expect("refusals lock")
                .iter()
                .map(|(d, n)| ((*d).to_owned(), *n))
                .collect(),
            reserve_errors: get(&self.reserve_errors),
            settled: get(&self.settled),
            released: get(&self.released),
            left_to_expire: get(&self.left_to_expire),
            finish_errors: get(&self.finish_errors),
            skipped: get(&self.skipped),
            last_error: self.last_error.lock().expect("last error lock").clone(),
        }
    }
}

/// How one simulated quota request ends after its call.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Settle(TokenCount),
    Release,
    LeaveToExpire,
}

/// One simulated quota request, decided up front by the run's random source.
#[derive(Debug, Clone, Copy)]
struct QuotaPlan {
    estimate: Tokens,
    call: Duration,
    fate: Fate,
}

impl QuotaPlan {
    fn random(rng: &mut ChaCha8Rng, last_abandoned: &mut Option<Instant>) -> Self {
        let estimate: u64 = rng.random_range(200..=4000);
        let call = Duration::from_millis(rng.random_range(50..=1500));
        let roll: f64 = rng.random();
        let may_abandon = last_abandoned.is_none_or(|at| at.elapsed() >= ABANDON_EVERY);
        let fate = if roll < RELEASE_SHARE {
            Fate::Release
        } else if roll < RELEASE_SHARE + ABANDON_SHARE && may_abandon {
            *last_abandoned = Some(Instant::now());
            Fate::LeaveToExpire
        } else {
            let actual = (estimate as f64 * rng.random_range(0.3..1.1)).round() as i128;
            Fate::Settle(TokenCount::parse("actual_tokens", actual).expect("a small count"))
        };
        Self { estimate: Tokens::parse("tokens", i128::from(estimate)).expect("a small amount"), call, fate }
    }
}

/// Every name of one kind of entity (`pool:` or `tenant:`) that has a snapshot.
async fn entities(db: &PgPool, kind: &str) -> anyhow::Result<Vec<String>> {
    crate::change::store::names_of_kind(db, kind).await.with_context(|| format!("listing {kind} snapshots"))
}

/// The pools and tenants to drive: those asked for (each must have a snapshot), else all.
async fn targets(db: &PgPool, args: &SimulateArgs) -> anyhow::Result<(Vec<PoolName>, Vec<TenantId>)> {
    let known_pools = entities(db, crate::change::Entity::POOL).await?;
    let known_tenants = entities(db, crate::change::Entity::TENANT).await?;
    let pools = if args.pools.is_empty() {
        known_pools.iter().filter_map(|p| PoolName::parse(p).ok()).collect()
    } else {
        for pool in &args.pools {
            anyhow::ensure!(
                known_pools.iter().any(|p| p == pool.as_str()),
                "--pool: no pool {:?} has a snapshot (known: {})",
                pool.as_str(),
                known_pools.join(", ")
            );
        }
        args.pools.clone()
    };
    let tenants = if args.tenants.is_empty() {
        known_tenants.iter().filter_map(|t| TenantId::parse(t).ok()).collect()
    } else {
        for tenant in &args.tenants {
            anyhow::ensure!(
                known_tenants.iter().any(|t| t == tenant.as_str()),
                "--tenant: no tenant {:?} has a snapshot (known: {})",
                tenant.as_str(),
                known_tenants.join(", ")
            );
        }
        args.tenants.clone()
    };
    anyhow::ensure!(
        !pools.is_empty() || !tenants.is_empty(),
        "nothing to simulate: no pool or tenant has a snapshot (run `tessera demo-seed` first)"
    );
    Ok((pools, tenants))
}

async fn draw(
    pools: Pools,
    outcomes: client::Outcomes,
    failing: Arc<Vec<(String, f64)>>,
    pool: PoolName,
    counters: Arc<Counters>,
) {
    match pools.draw(&pool).await {
        Ok(drawn) => {
            Counters::add(match drawn.source {
                DrawSource::Redis => &counters.draws_redis,
                DrawSource::Local => &counters.draws_local,
                DrawSource::Static => &counters.draws_static,
            });
            // The simulated call through the drawn channel, reported as its outcome.
            let rate = failing.iter().find(|(c, _)| *c == drawn.member).map_or(BASE_FAILURE_RATE, |(_, r)| *r);
            let failed = rand::random::<f64>() < rate;
            let latency = 80 + (rand::random::<f64>() * 220.0) as u64;
            if let Ok(code) = client::health::ChannelCode::parse(&drawn.member) {
                let counts = client::health::OutcomeCounts {
                    ok: u64::from(!failed),
                    fail: u64::from(failed),
                    latency_ms_sum: latency,
                    latency_count: 1,
                };
                if let Err(e) = outcomes.record_counts(&code, &counts).await {
                    tracing::debug!(error = %e, "reporting an outcome failed");
                }
            }
        }
        Err(e) => counters.failed(&counters.draw_errors, &format!("draw from {pool}"), e),
    }
}

async fn quota_request(quotas: Quotas, tenant: TenantId, plan: QuotaPlan, counters: Arc<Counters>) {
    let request = RequestId::parse(&format!("sim-{}", uuid::Uuid::new_v4().simple())).expect("a valid request id");
    match quotas.reserve(&tenant, &request, plan.estimate).await {
        Ok(ReserveOutcome::Reserved(_)) => Counters::add(&counters.reserves_admitted),
        Ok(ReserveOutcome::Refused(refusal)) => {
            Counters::add(&counters.reserves_refused);
            *counters.refused_by.lock().expect("refusals lock").entry(refusal.dimension.name()).or_default() += 1;
            return;
        }
        Err(e) => return counters.failed(&counters.reserve_errors, &format!("reserve for {tenant}"), e),
    }
    tokio::time::sleep(plan.call).await;
    match plan.fate {
        Fate::Settle(actual) => match quotas.settle(&tenant, &request, actual, false).await {
            Ok(SettleOutcome::Settled { .. } | SettleOutcome::Queued) => Counters::add(&counters.settled),
            Ok(other) => {
                counters.failed(&counters.finish_errors, &format!("settle for {tenant}"), format!("{other:?}"))
            }
            Err(e) => counters.failed(&counters.finish_errors, &format!("settle for {tenant}"), e),
        },
        Fate::Release => match quotas.release(&tenant, &request).await {
            Ok(ReleaseOutcome::Released { .. } | ReleaseOutcome::Queued) => Counters::add(&counters.released),
            Ok(other) => {
                counters.failed(&counters.finish_errors, &format!("release for {tenant}"), format!("{other:?}"))
            }
            Err(e) => counters.failed(&counters.finish_errors, &format!("release for {tenant}"), e),
        },
        Fate::LeaveToExpire => Counters::add(&counters.left_to_expire),
    }
}

/// Drives traffic at `args.rate` until `args.seconds` pass or `stop` completes, calling
/// `report` every `args.report_every` seconds; waits (a few seconds at most) for the
/// requests in flight, then returns the totals.
pub async fn run(
    state: &AppState,
    args: &SimulateArgs,
    stop: impl Future<Output = ()>,
    mut report: impl FnMut(&Totals),
) -> anyhow::Result<Totals> {
    let (pools, tenants) = targets(&state.db, args).await?;
    tracing::info!(
        pools = ?pools.iter().map(PoolName::as_str).collect::<Vec<_>>(),
        tenants = ?tenants.iter().map(TenantId::as_str).collect::<Vec<_>>(),
        rate = args.rate,
        "simulating traffic"
    );
    let (stop_refill, refill_stopped) = tokio::sync::watch::channel(false);
    let refiller =
        args.refill.then(|| tokio::spawn(crate::jobs::pool_refill::listen(state.clone(), None, refill_stopped)));
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let counters = Arc::new(Counters::default());
    let failing = Arc::new(args.fail.clone());
    let started = Instant::now();
    let deadline = args.seconds.map(|s| started + Duration::from_secs(s));
    let every = Duration::from_secs(args.report_every);
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut reports = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let mut tasks = JoinSet::new();
    let mut issued: u64 = 0;
    let mut last_abandoned = None;
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = reports.tick() => report(&counters.totals(started)),
            _ = ticks.tick() => {
                let now = Instant::now();
                let until = deadline.map_or(now, |d| now.min(d));
                // Requests are issued on schedule: as many as the rate says are due by now.
                let due = ((until - started).as_secs_f64() * f64::from(args.rate)) as u64;
                while issued < due {
                    issued += 1;
                    if tasks.len() >= MAX_IN_FLIGHT {
                        Counters::add(&counters.skipped);
                        continue;
                    }
                    if !pools.is_empty() {
                        let pool = pools[rng.random_range(0..pools.len())].clone();
                        tasks.spawn(draw(
                            state.pools.clone(),
                            state.outcomes.clone(),
                            failing.clone(),
                            pool,
                            counters.clone(),
                        ));
                    }
                    if !tenants.is_empty() {
                        let tenant = tenants[rng.random_range(0..tenants.len())].clone();
                        let plan = QuotaPlan::random(&mut rng, &mut last_abandoned);
                        tasks.spawn(quota_request(state.quotas.clone(), tenant, plan, counters.clone()));
                    }
                }
                while tasks.try_join_next().is_some() {}
                if deadline.is_some_and(|d| now >= d) {
                    break;
                }
            }
        }
    }
    // Settles wait for their simulated call: let them finish, for a bounded time.
    if tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!(in_flight = tasks.len(), "requests still in flight after the run; abandoned");
        tasks.abort_all();
    }
    let _ = stop_refill.send(true);
    if let Some(refiller) = refiller {
        let _ = refiller.await;
    }
    Ok(counters.totals(started))
}

/// One summary line for people.
pub fn render(t: &Totals) -> String {
    let refused_by = if t.refused_by.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = t.refused_by.iter().map(|(d, n)| format!("{d} {n}")).collect();
        format!(" ({})", parts.join(", "))
    };
    let mut line = format!(
        "{:>6.0}s  draws {} (redis {}, local {}, static {}, errors {})  reserves admitted {}, refused {}{}, errors {}  \
         settled {}, released {}, left to expire {}, errors {}",
        t.seconds,
        t.draws(),
        t.draws_redis,
        t.draws_local,
        t.draws_static,
        t.draw_errors,
        t.reserves_admitted,
        t.reserves_refused,
        refused_by,
        t.reserve_errors,
        t.settled,
        t.released,
        t.left_to_expire,
        t.finish_errors,
    );
    if t.skipped > 0 {
        line.push_str(&format!("  skipped {} (too many in flight)", t.skipped));
    }
    if let Some(error) = &t.last_error {
        line.push_str(&format!("  last error: {error}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `tessera simulate`'s arguments, as the command line flattens them.
    #[derive(clap::Parser)]
    struct Simulate {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn parse(args: &[&str]) -> Result<SimulateArgs, clap::Error> {
        let mut argv = vec!["simulate"];
        argv.extend_from_slice(args);
        Simulate::try_parse_from(argv).map(|s| s.args)
    }

    #[test]
    fn the_command_line_has_defaults_and_takes_repeated_pools_and_tenants() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.rate, a.seconds, a.report_every, a.refill), (20, None, 5, false));
        let a =
            parse(&["--rate", "100", "--seconds", "30", "--pool", "cn-pay", "--pool", "sea-pay", "--tenant", "acme"])
                .unwrap();
        assert_eq!((a.rate, a.seconds), (100, Some(30)));
        assert_eq!(a.pools.iter().map(PoolName::as_str).collect::<Vec<_>>(), ["cn-pay", "sea-pay"]);
        assert_eq!(a.tenants.iter().map(TenantId::as_str).collect::<Vec<_>>(), ["acme"]);
    }

    #[test]
    fn out_of_range_or_malformed_arguments_are_refused_naming_the_flag() {
        for bad in [&["--rate", "0"][..], &["--rate", "5001"], &["--seconds", "0"], &["--report-every", "0"]] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad[0]), "{bad:?}: {err}");
        }
        let err = parse(&["--pool", "a{b"]).unwrap_err().to_string();
        assert!(err.contains("--pool") && err.contains("'{'"), "{err}");
        let err = parse(&["--tenant", ""]).unwrap_err().to_string();
        assert!(err.contains("--tenant"), "{err}");
    }

    #[test]
    fn quota_plans_mostly_settle_and_abandon_at_most_once_per_interval() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut last = None;
        let plans: Vec<QuotaPlan> = (0..2000).map(|_| QuotaPlan::random(&mut rng, &mut last)).collect();
        let abandoned = plans.iter().filter(|p| matches!(p.fate, Fate::LeaveToExpire)).count();
        let released = plans.iter().filter(|p| matches!(p.fate, Fate::Release)).count();
        assert_eq!(abandoned, 1, "one per {ABANDON_EVERY:?}");
        assert!((100..=220).contains(&released), "about 8 % released: {released}");
        for p in &plans {
            assert!((200..=4000).contains(&p.estimate.get()) && p.call <= Duration::from_millis(1500));
            if let Fate::Settle(actual) = p.fate {
                assert!(actual.get() <= p.estimate.get() * 11 / 10 + 1, "{p:?}");
            }
        }
    }

    #[test]
    fn the_summary_line_names_every_counter_and_the_last_error() {
        let t = Totals {
            draws_redis: 7,
            draws_local: 2,
            reserves_refused: 3,
            refused_by: BTreeMap::from([("concurrency".to_owned(), 2), ("tokens".to_owned(), 1)]),
            last_error: Some("boom".into()),
            ..Totals::default()
        };
        let line = render(&t);
        assert!(line.contains("draws 9 (redis 7, local 2"), "{line}");
        assert!(line.contains("refused 3 (concurrency 2, tokens 1)") && line.ends_with("last error: boom"), "{line}");
    }
}
