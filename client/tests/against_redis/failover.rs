//! Failovers under draws and reserves, on Redis processes of the test's own: through
//! Redis Sentinel (a failover Sentinel runs, in which the old primary stays writable for
//! seconds and the client follows the sentinels' answer, then a primary killed outright),
//! and on a Redis Cluster whose replica takes over its primary (`CLUSTER FAILOVER`). Each
//! is followed to the new primary within 5 s; meanwhile draws come from the local pool and
//! reserves from the fallback, never an error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pool::{apportioned, keep_filled, noon, pool, snapshot, tally};
use crate::support::{node, KeyGuard, OwnCluster, OwnSentinel, SENTINEL_MASTER};
use client::pool::{Draw, DrawSource, PoolError, PoolName, PoolSnapshot};
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

fn on_cluster(cluster: &OwnCluster) -> RedisHandle {
    let timeouts = RedisTimeouts::default();
    RedisHandle::on(RedisTarget::cluster(&cluster.nodes(), timeouts).expect("valid nodes"), timeouts)
}

/// How many scripts the server on `port` ran for clients (not replicated to it).
fn scripts_run(port: u16) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut node(port)).unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits (up to 30 s) until the server on `port` runs scripts for clients beyond `before`.
fn serving(port: u16, before: u64) -> Instant {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        if scripts_run(port) > before {
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

type Draws = Vec<(Instant, Result<Draw, PoolError>)>;
type Reserves = Vec<(Instant, RequestId, Result<ReserveOutcome, QuotaError>)>;

/// A pool (45:30:25 in batches of 100) and a fail_open_limited tenant, with a drawer, a
/// reserver and a refiller running on them until [`Traffic::stop`].
struct Traffic {
    quotas: Quotas,
    tenant: TenantId,
    snapshot: PoolSnapshot,
    stop: Arc<AtomicBool>,
    drawer: tokio::task::JoinHandle<Draws>,
    reserver: tokio::task::JoinHandle<Reserves>,
    refiller: tokio::task::JoinHandle<()>,
}

impl Traffic {
    async fn start(handle: impl Fn() -> RedisHandle, guard: &KeyGuard, p: &PoolName, tenant: &str) -> Self {
        let clock = Clock::manual(noon());
        let admin = PoolAdmin::new(handle(), guard.keys.clone(), clock.clone());
        let pools = Pools::new(handle(), guard.keys.clone(), clock.clone(), HashMap::new(), None);
        let quotas = Quotas::with_clock(handle(), guard.keys.clone(), clock.clone(), None);
        let snapshot = snapshot("A=45,B=30,C=25", 100, 20, Ordering::Smooth);
        assert!(admin.publish(p, &snapshot).await.expect("publish"));
        keep_filled(&admin, p).await;
        let t = TenantId::parse(tenant).unwrap();
        let allowance = Tokens::parse("fallback_allowance", 1_000_000).unwrap();
        let quota = TenantQuota {
            version: 1,
            monthly_tokens: TokenCount::parse("monthly_tokens", 100_000_000).unwrap(),
            daily_requests: 10_000_000,
            concurrency: 1_000_000,
            grants: Vec::new(),
            reservation_ttl: Duration::from_secs(600),
            retention_days: 30,
            idempotency_window: client::quota::DEFAULT_IDEMPOTENCY_WINDOW,
            fallback: FallbackPolicy::FailOpenLimited { allowance },
        };
        assert!(quotas.publish(&t, &quota).await.expect("publish the tenant").0);
        let stop = Arc::new(AtomicBool::new(false));
        let drawer = {
            let (pools, p, stop) = (pools.clone(), p.clone(), stop.clone());
            tokio::spawn(async move {
                let mut draws = Draws::new();
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
                let mut reserves = Reserves::new();
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
        Self { quotas, tenant: t, snapshot, stop, drawer, reserver, refiller }
    }

    /// Stops the traffic: the draws and the reserves, each with when it was asked.
    async fn stop(&mut self) -> (Draws, Reserves) {
        self.stop.store(true, AtomicOrdering::SeqCst);
        let draws = (&mut self.drawer).await.unwrap();
        let reserves = (&mut self.reserver).await.unwrap();
        (&mut self.refiller).await.unwrap();
        (draws, reserves)
    }

    /// Charges the fallback's journal to Redis (up to 10 s).
    async fn charge_the_journal(&self) {
        let started = Instant::now();
        while self.quotas.offline_summary().operations > 0 && started.elapsed() < Duration::from_secs(10) {
            let _ = self.quotas.flush_offline().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.quotas.offline_summary().operations, 0, "the journal was charged to redis");
    }
}

/// When the draws Redis served came, and how many came from the local pool.
fn from_redis(draws: &Draws) -> (Vec<Instant>, usize) {
    let at = draws
        .iter()
        .filter(|(_, d)| d.as_ref().is_ok_and(|d| d.source == DrawSource::Redis))
        .map(|(at, _)| *at)
        .collect();
    (at, draws.iter().filter(|(_, d)| d.as_ref().is_ok_and(|d| d.source == DrawSource::Local)).count())
}

/// When the reserves Redis admitted were asked.
fn reserved_in_redis(reserves: &Reserves) -> Vec<Instant> {
    reserves
        .iter()
        .filter(|(_, _, r)| matches!(r, Ok(ReserveOutcome::Reserved(r)) if r.source == Source::Redis))
        .map(|(at, ..)| *at)
        .collect()
}

/// Tickets off their batches among the draws Redis served, over the whole batches of them.
fn tickets_off(draws: &Draws, snapshot: &PoolSnapshot) -> (u64, usize) {
    let served: Vec<&str> = draws
        .iter()
        .filter_map(|(_, d)| d.as_ref().ok().filter(|d| d.source == DrawSource::Redis))
        .map(|d| d.member.as_str())
        .collect();
    let whole = served.len() / 100;
    let (got, want) = (tally(&served[..whole * 100]), apportioned(&snapshot.weights, 100, whole));
    (want.iter().map(|(m, n)| got.get(m).copied().unwrap_or(0).abs_diff(*n)).sum::<u64>() / 2, whole * 100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failovers_under_draws_and_reserves_are_followed_within_5_s_and_never_answer_an_error() {
    // Arrange: a pool and a fail_open_limited tenant through Sentinel, with traffic running
    let mut own = OwnSentinel::start();
    let guard = KeyGuard::new("so");
    let p = pool("failing-over");
    let mut traffic = Traffic::start(|| through_sentinel(&own), &guard, &p, "acme").await;
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
    let followed_a = tokio::task::block_in_place(|| serving(second, 0));
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
    let before_b = scripts_run(third);
    let followed_b = tokio::task::block_in_place(|| serving(third, before_b));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (draws, reserves) = traffic.stop().await;

    // Assert: never an error; Redis serves again within 5 s of each promotion
    assert_eq!(third, first, "the old primary is the primary again");
    let failed: Vec<_> = draws.iter().filter_map(|(_, d)| d.as_ref().err()).collect();
    assert!(failed.is_empty(), "draws answered errors: {failed:?}");
    let refused: Vec<_> = reserves.iter().filter_map(|(_, _, r)| r.as_ref().err()).collect();
    assert!(refused.is_empty(), "reserves answered errors: {refused:?}");
    let (from_redis, local) = from_redis(&draws);
    let reserved_in_redis = reserved_in_redis(&reserves);
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
    traffic.charge_the_journal().await;
    let near = |at: Instant, event: Instant, until: Instant| at + Duration::from_secs(1) > event && at < until;
    let mut lost_near_a_failover = 0;
    for (asked, rid, reserved) in &reserves {
        let one = TokenCount::parse("actual_tokens", 1).unwrap();
        let settled = traffic.quotas.settle(&traffic.tenant, rid, one, false).await.unwrap();
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
    let (off, whole) = tickets_off(&draws, &traffic.snapshot);
    eprintln!(
        "lost with an old primary: {lost_near_a_failover} of {} reservations, {off} of {whole} tickets",
        reserved_in_redis.len(),
    );
    assert!(whole >= 200, "only {whole} whole batches' draws from redis");
}

/// The port of the primary that serves `key` on the cluster, and of its replica.
fn primary_and_replica(cluster: &OwnCluster, key: &str) -> (u16, u16) {
    let mut conn = cluster.node(cluster.ports[0]);
    let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut conn).unwrap();
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn).unwrap();
    let nodes: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    let port =
        |address: &str| -> u16 { address.split('@').next().unwrap().rsplit(':').next().unwrap().parse().unwrap() };
    let serves = |range: &&str| {
        let (from, to) = range.split_once('-').unwrap_or((range, range));
        from.parse::<u16>().is_ok_and(|f| f <= slot) && to.parse::<u16>().is_ok_and(|t| slot <= t)
    };
    let primary = nodes
        .iter()
        .find(|f| f[2].contains("master") && f[8..].iter().any(serves))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}:\n{text}"));
    let replica =
        nodes.iter().find(|f| f[3] == primary[0]).unwrap_or_else(|| panic!("no replica of {}:\n{text}", primary[0]));
    (port(primary[1]), port(replica[1]))
}

/// The role the server on `port` says it has (`master` or `slave`).
fn role(port: u16) -> String {
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut node(port)).unwrap_or_default();
    reply.first().and_then(|v| redis::from_redis_value::<String>(v).ok()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_failover_under_draws_and_reserves_is_followed_within_5_s_and_loses_nothing() {
    // Arrange: three primaries with a replica each; a pool and a fail_open_limited tenant
    // on one primary (the tenant named to hash there), with traffic running
    let cluster = OwnCluster::with_replicas();
    let guard = KeyGuard::new("cf");
    let p = pool("failing-over");
    let (primary, replica) = primary_and_replica(&cluster, &guard.keys.pool_tickets(p.as_str()));
    let tenant = (0..)
        .map(|i| format!("acme-{i}"))
        .find(|t| primary_and_replica(&cluster, &guard.keys.quota_state(t)).0 == primary)
        .unwrap();
    let mut traffic = Traffic::start(|| on_cluster(&cluster), &guard, &p, &tenant).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = scripts_run(primary);
    assert!(before > 0, "the primary serves the traffic");

    // Act: the replica takes over (a manual failover: the primary stops taking writes, the
    // replica catches up, then is promoted and the old primary follows it)
    let asked = Instant::now();
    let () = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut cluster.node(replica)).expect("a failover");
    let promoted = tokio::task::block_in_place(|| {
        while role(replica) != "master" {
            assert!(asked.elapsed() < Duration::from_secs(30), "the replica was not promoted within 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        Instant::now()
    });
    let followed = tokio::task::block_in_place(|| serving(replica, 0));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (draws, reserves) = traffic.stop().await;

    // Assert: never an error; the new primary serves within 5 s of its promotion, and the
    // old one is a replica
    assert_eq!(role(primary), "slave", "the old primary follows the new one");
    let failed: Vec<_> = draws.iter().filter_map(|(_, d)| d.as_ref().err()).collect();
    assert!(failed.is_empty(), "draws answered errors: {failed:?}");
    let refused: Vec<_> = reserves.iter().filter_map(|(_, _, r)| r.as_ref().err()).collect();
    assert!(refused.is_empty(), "reserves answered errors: {refused:?}");
    let (from_redis, local) = from_redis(&draws);
    let reserved_in_redis = reserved_in_redis(&reserves);
    let draw = first_after(&from_redis, followed).expect("a draw from redis after the failover");
    let reserve = first_after(&reserved_in_redis, followed).expect("a reserve in redis after the failover");
    eprintln!(
        "promoted {:?} after the failover was asked; the new primary ran the clients' scripts {:?} after; then a draw from redis after {draw:?}, a reserve after {reserve:?}; {} draws ({local} from the local pool), {} reserves ({} admitted by the fallback)",
        promoted - asked,
        followed - promoted,
        draws.len(),
        reserves.len(),
        reserves.len() - reserved_in_redis.len(),
    );
    assert!(followed - promoted <= Duration::from_secs(5), "followed {:?} after the promotion", followed - promoted);

    // A manual failover hands over what the primary wrote: every admitted reservation
    // settles, and the tickets Redis served are whole batches of the weights.
    traffic.charge_the_journal().await;
    for (_, rid, reserved) in &reserves {
        let one = TokenCount::parse("actual_tokens", 1).unwrap();
        let settled = traffic.quotas.settle(&traffic.tenant, rid, one, false).await.unwrap();
        assert!(matches!(settled, SettleOutcome::Settled { .. }), "{rid} ({reserved:?}) was lost: {settled:?}");
    }
    let (off, whole) = tickets_off(&draws, &traffic.snapshot);
    assert!(whole >= 200, "only {whole} whole batches' draws from redis");
    assert_eq!(off, 0, "{off} of {whole} tickets off their batches");
}

#[tokio::test]
async fn a_primary_short_of_its_replicas_refuses_writes_and_counts_as_unreachable() {
    // Arrange: a server of the test's own that wants one replica for a write, and has none
    // (what an old primary cut off from its replica says, with min-replicas-to-write 1)
    let port = crate::support::free_ports()[0];
    let mut own = crate::support::Processes::new("noreplicas");
    own.spawn(port, &["--min-replicas-to-write", "1", "--min-replicas-max-lag", "10"]);
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
    drop(own);

    // Assert: refused with NOREPLICAS, which the fallbacks treat as Redis away (and a
    // connection through Sentinel makes again)
    for refused in [plain, scripted] {
        let e = refused.expect_err("a write without its replica is refused");
        assert_eq!(e.code(), Some("NOREPLICAS"), "{e}");
        assert!(client::is_unreachable(&e), "{e}");
        assert!(client::must_reconnect(&e, true) && !client::must_reconnect(&e, false), "{e}");
    }
}
