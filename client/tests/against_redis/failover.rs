//! The client through Redis Sentinel, on a primary and a replica of the test's own: a
//! failover Sentinel runs (the old primary stays writable for seconds: the client follows
//! the sentinels' answer) and a primary killed outright are both followed to the new
//! primary within 5 s while draws and reserves go on; meanwhile draws come from the local
//! pool and reserves from the fallback, never an error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pool::{apportioned, keep_filled, noon, pool, snapshot, tally};
use crate::support::{KeyGuard, OwnSentinel, SENTINEL_MASTER};
use client::pool::{Draw, DrawSource, PoolError};
use client::quota::{
    FallbackPolicy, QuotaError, RequestId, ReserveOutcome, SettleOutcome, Source, TenantId, TenantQuota, TokenCount,
    Tokens,
};
use client::{Clock, PoolAdmin, Pools, Quotas, RedisHandle, RedisTarget, RedisTimeouts};
use engine::Ordering;

fn through_sentinel(own: &OwnSentinel) -> RedisHandle {
    let timeouts = RedisTimeouts::default();
    let target = RedisTarget::sentinel(&[own.sentinel_url()], SENTINEL_MASTER, "redis://127.0.0.1").expect("valid");
    RedisHandle::on(target, timeouts)
}

/// How many scripts the server on `port` ran for clients (not replicated to it).
fn scripts_run(own: &OwnSentinel, port: u16) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut own.node(port)).unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits (up to 30 s) until the server on `port` runs scripts for clients beyond `before`.
fn serving(own: &OwnSentinel, port: u16, before: u64) -> Instant {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if scripts_run(own, port) > before {
            return Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the primary on {port} ran no script of the clients within 30 s");
}

/// Waits (up to 30 s) until the sentinel names a primary other than `from`.
fn promoted(own: &OwnSentinel, from: u16) -> (u16, Instant) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let now = own.primary_port();
        if now != from {
            return (now, Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the sentinel did not promote a new primary within 30 s");
}

/// How long after `since` the first of `times` came (`None`: none did).
fn first_after(times: &[Instant], since: Instant) -> Option<Duration> {
    times.iter().find(|t| **t >= since).map(|t| *t - since)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failovers_under_draws_and_reserves_are_followed_within_5_s_and_never_answer_an_error() {
    // Arrange: a pool (45:30:25 in batches of 100) and a fail_open_limited tenant through
    // Sentinel; a drawer, a reserver and a refiller running all along
    let mut own = OwnSentinel::start();
    let guard = KeyGuard::new("so");
    let clock = Clock::manual(noon());
    let admin = PoolAdmin::new(through_sentinel(&own), guard.keys.clone(), clock.clone());
    let pools = Pools::new(through_sentinel(&own), guard.keys.clone(), clock.clone(), HashMap::new(), None);
    let quotas = Quotas::with_clock(through_sentinel(&own), guard.keys.clone(), clock.clone(), None);
    let p = pool("failing-over");
    let s = snapshot("A=45,B=30,C=25", 100, 20, Ordering::Smooth);
    assert!(admin.publish(&p, &s).await.expect("publish"));
    keep_filled(&admin, &p).await;
    let t = TenantId::parse("acme").unwrap();
    let allowance = Tokens::parse("fallback_allowance", 1_000_000).unwrap();
    let quota = TenantQuota {
        version: 1,
        monthly_tokens: TokenCount::parse("monthly_tokens", 100_000_000).unwrap(),
        daily_requests: 10_000_000,
        concurrency: 1_000_000,
        grants: Vec::new(),
        reservation_ttl: Duration::from_secs(600),
        retention_days: 30,
        fallback: FallbackPolicy::FailOpenLimited { allowance },
    };
    assert!(quotas.publish(&t, &quota).await.expect("publish the tenant").0);
    let stop = Arc::new(AtomicBool::new(false));
    let drawer = {
        let (pools, p, stop) = (pools.clone(), p.clone(), stop.clone());
        tokio::spawn(async move {
            let mut draws: Vec<(Instant, Result<Draw, PoolError>)> = Vec::new();
            while !stop.load(AtomicOrdering::SeqCst) {
                draws.push((Instant::now(), pools.draw(&p).await));
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            draws
        })
    };
    let reserver = {
        let (quotas, t, stop) = (quotas.clone(), t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut reserves: Vec<(Instant, RequestId, Result<ReserveOutcome, QuotaError>)> = Vec::new();
            let one = Tokens::parse("tokens", 1).unwrap();
            for i in 0.. {
                if stop.load(AtomicOrdering::SeqCst) {
                    break;
                }
                let rid = RequestId::parse(&format!("r-{i}")).unwrap();
                let asked = Instant::now();
                reserves.push((asked, rid.clone(), quotas.reserve(&t, &rid, one).await));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            reserves
        })
    };
    let refiller = {
        let (admin, p, stop) = (admin.clone(), p.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(AtomicOrdering::SeqCst) {
                let _ = admin.refill(&p).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Act: (a) Sentinel fails the primary over (the old one turns replica: READONLY);
    // (b) once Sentinel may fail over again, the new primary is killed
    let first = own.primary_port();
    let failover_asked = Instant::now();
    let () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(SENTINEL_MASTER)
        .query(&mut own.node(own.sentinel_port))
        .expect("a failover");
    let (second, promoted_a) = tokio::task::block_in_place(|| promoted(&own, first));
    let followed_a = tokio::task::block_in_place(|| serving(&own, second, 0));
    // The old primary must follow the new one (Sentinel turns it into a replica within
    // about ten seconds) before it can be promoted in turn.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(40) {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut own.node(first)).unwrap_or_default();
        if info.contains("role:slave") && info.contains("master_link_status:up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed_at = Instant::now();
    own.kill(second);
    let (third, promoted_b) = tokio::task::block_in_place(|| promoted(&own, second));
    let before_b = scripts_run(&own, third);
    let followed_b = tokio::task::block_in_place(|| serving(&own, third, before_b));
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, AtomicOrdering::SeqCst);
    let draws = drawer.await.unwrap();
    let reserves = reserver.await.unwrap();
    refiller.await.unwrap();

    // Assert: never an error; Redis serves again within 5 s of each promotion
    assert_eq!(third, first, "the old primary is the primary again");
    let failed: Vec<_> = draws.iter().filter_map(|(_, d)| d.as_ref().err()).collect();
    assert!(failed.is_empty(), "draws answered errors: {failed:?}");
    let refused: Vec<_> = reserves.iter().filter_map(|(_, _, r)| r.as_ref().err()).collect();
    assert!(refused.is_empty(), "reserves answered errors: {refused:?}");
    let from_redis: Vec<Instant> = draws
        .iter()
        .filter(|(_, d)| d.as_ref().is_ok_and(|d| d.source == DrawSource::Redis))
        .map(|(at, _)| *at)
        .collect();
    let reserved_in_redis: Vec<Instant> = reserves
        .iter()
        .filter(|(_, _, r)| matches!(r, Ok(ReserveOutcome::Reserved(r)) if r.source == Source::Redis))
        .map(|(at, ..)| *at)
        .collect();
    let local = draws.iter().filter(|(_, d)| d.as_ref().is_ok_and(|d| d.source == DrawSource::Local)).count();
    let fallback = reserves.len() - reserved_in_redis.len();
    for (name, at, followed) in [("the failover", promoted_a, followed_a), ("the kill", promoted_b, followed_b)] {
        let draw = first_after(&from_redis, followed).unwrap_or_else(|| panic!("no draw from redis after {name}"));
        let reserve =
            first_after(&reserved_in_redis, followed).unwrap_or_else(|| panic!("no reserve in redis after {name}"));
        eprintln!(
            "{name}: the new primary ran the clients' scripts {:?} after its promotion; then a draw from redis after {draw:?}, a reserve after {reserve:?}",
            followed - at
        );
        assert!(followed - at <= Duration::from_secs(5), "{name}: followed {:?} after the promotion", followed - at);
    }
    eprintln!(
        "{} draws ({local} from the local pool), {} reserves ({fallback} admitted by the fallback); promotion {:?} after the failover was asked, {:?} after the kill",
        draws.len(),
        reserves.len(),
        promoted_a - failover_asked,
        promoted_b - killed_at
    );

    // Every reservation admitted by the fallback, or by Redis more than a second before a
    // failover began (replicated by then), or after the last promotion, is still known to
    // Redis once the journal is charged: each settles. Replication is asynchronous: what the
    // old primary admitted in its last moments may be gone with it (counted, not hidden).
    let started = Instant::now();
    while quotas.offline_summary().operations > 0 && started.elapsed() < Duration::from_secs(10) {
        let _ = quotas.flush_offline().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(quotas.offline_summary().operations, 0, "the journal was charged to redis");
    let near = |at: Instant, event: Instant, until: Instant| at + Duration::from_secs(1) > event && at < until;
    let mut lost_near_a_failover = 0;
    for (asked, rid, reserved) in &reserves {
        let settled = quotas.settle(&t, rid, TokenCount::parse("actual_tokens", 1).unwrap(), false).await.unwrap();
        if matches!(settled, SettleOutcome::Settled { .. }) {
            continue;
        }
        let by_redis = matches!(reserved, Ok(ReserveOutcome::Reserved(r)) if r.source == Source::Redis);
        let excused = near(*asked, failover_asked, followed_a + Duration::from_secs(1))
            || near(*asked, killed_at, followed_b + Duration::from_secs(1));
        assert!(by_redis && excused, "{rid} ({reserved:?}) was lost: the settle answered {settled:?}");
        lost_near_a_failover += 1;
    }
    // The tickets Redis served: whole batches of the weights, but for tickets an old
    // primary served in its last moments that its replica never saw (served again).
    let served: Vec<&str> = draws
        .iter()
        .filter_map(|(_, d)| d.as_ref().ok().filter(|d| d.source == DrawSource::Redis))
        .map(|d| d.member.as_str())
        .collect();
    let whole = served.len() / 100;
    let (got, want) = (tally(&served[..whole * 100]), apportioned(&s.weights, 100, whole));
    let off: u64 = want.iter().map(|(m, n)| got.get(m).copied().unwrap_or(0).abs_diff(*n)).sum::<u64>() / 2;
    eprintln!(
        "lost with an old primary: {lost_near_a_failover} of {} reservations, {off} of {} tickets",
        reserved_in_redis.len(),
        whole * 100
    );
    assert!(whole >= 2, "only {} draws from redis", served.len());
}

#[tokio::test]
async fn a_primary_short_of_its_replicas_refuses_writes_and_counts_as_unreachable() {
    // Arrange: a server of the test's own that wants one replica for a write, and has none
    // (what an old primary cut off from its replica says, with min-replicas-to-write 1)
    let port = crate::support::free_ports()[0];
    let dir = std::env::temp_dir().join(format!("tessera-noreplicas-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"])
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let started = Instant::now();
    let mut conn = loop {
        match client.get_multiplexed_async_connection().await {
            Ok(conn) => break conn,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(10), "the server did not start: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    // Act: a write, plain and in a script
    let plain = redis::cmd("SET").arg("k").arg("v").query_async::<()>(&mut conn).await;
    let scripted =
        redis::Script::new("return redis.call('SET', KEYS[1], 'v')").key("k").invoke_async::<()>(&mut conn).await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);

    // Assert: refused with NOREPLICAS, which the fallbacks treat as Redis away (and a
    // connection through Sentinel makes again)
    for refused in [plain, scripted] {
        let e = refused.expect_err("a write without its replica is refused");
        assert_eq!(e.code(), Some("NOREPLICAS"), "{e}");
        assert!(client::is_unreachable(&e), "{e}");
        assert!(client::must_reconnect(&e, true) && !client::must_reconnect(&e, false), "{e}");
    }
}
