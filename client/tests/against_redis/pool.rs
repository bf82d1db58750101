//! Ticket pools against a real Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`): the
//! draw, refill and count scripts as `Pools` and `PoolAdmin` call them, under concurrency,
//! across batch seams and local midnights, through a script cache flush and Redis going away.
//!
//! Every test writes under its own random key prefix and removes its keys afterwards
//! (`SCAN MATCH <prefix>:*` + `UNLINK`, also when the test panics); tests run in parallel.
//! Hand-set clocks sit in the future: a day's hit counters expire 48 h after the day by the
//! script's clock, so a date in the past would expire them at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{at, raw_connection, redis_address, redis_url, KeyGuard};
use chrono::{DateTime, Utc};
use client::pool::{Draw, DrawSource, PoolError, PoolKind, PoolName, PoolSnapshot, RefillOutcome};
use client::{Clock, Keys, PoolAdmin, Pools, RedisHandle};
use engine::hashing::HashRing;
use engine::metrics::Metrics;
use engine::{Apportioner, BatchSize, Ordering, Weights};
use testproxy::{through, Proxy};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// One test's pool client and control plane, clock and keys. The control plane always
/// talks to Redis directly; the pool client may go through a proxy.
struct Harness {
    pools: Pools,
    admin: PoolAdmin,
    clock: Clock,
    guard: KeyGuard,
}

impl Harness {
    fn keys(&self) -> &Keys {
        &self.guard.keys
    }

    /// Another pool client (its own connection) on the same keys and clock.
    fn client_at(&self, url: &str, statics: HashMap<PoolName, Weights>) -> Pools {
        pools_at(url, self.keys().clone(), self.clock.clone(), statics)
    }

    /// Another control plane (its own connection) on the same keys and clock.
    fn admin_instance(&self) -> PoolAdmin {
        PoolAdmin::new(handle(&redis_url()), self.keys().clone(), self.clock.clone())
    }
}

fn handle(url: &str) -> RedisHandle {
    crate::support::handle_for(url)
}

fn pools_at(url: &str, keys: Keys, clock: Clock, statics: HashMap<PoolName, Weights>) -> Pools {
    Pools::new(handle(url), keys, clock, statics, None)
}

fn harness(clock: Clock) -> Harness {
    harness_at(&redis_url(), clock)
}

fn harness_at(url: &str, clock: Clock) -> Harness {
    let guard = KeyGuard::new("pt");
    let pools = pools_at(url, guard.keys.clone(), clock.clone(), HashMap::new());
    let admin = PoolAdmin::new(handle(&redis_url()), guard.keys.clone(), clock.clone());
    Harness { pools, admin, clock, guard }
}

/// Noon in Singapore (UTC+8, no DST) in the middle of a month, years ahead of any real
/// clock (see the crate docs): the pool's day is 2030-03-15.
pub(crate) fn noon() -> DateTime<Utc> {
    at("2030-03-15T04:00:00Z")
}

const SINGAPORE: &str = "Asia/Singapore";

pub(crate) fn pool(name: &str) -> PoolName {
    PoolName::parse(name).unwrap()
}

fn weights(spec: &str) -> Weights {
    Weights::parse_spec(spec).unwrap()
}

/// A version-1 snapshot of `spec` (`"A=5,B=3,C=2"`), in Singapore, no caps or peaks.
pub(crate) fn snapshot(spec: &str, batch_size: u32, low_water: u32, ordering: Ordering) -> PoolSnapshot {
    PoolSnapshot {
        version: 1,
        kind: PoolKind::Channels,
        weights: weights(spec),
        tiers: Default::default(),
        batch_size,
        low_water,
        ordering,
        timezone: SINGAPORE.to_owned(),
        peak_windows: Vec::new(),
        caps: BTreeMap::new(),
        eject_rebuild_percent: 50,
        ejected: Default::default(),
        window_caps: None,
        draw_log: true,
    }
}

async fn publish(h: &Harness, p: &PoolName, s: &PoolSnapshot) {
    let written = h.admin.publish(p, s).await.expect("publish");
    assert!(written, "snapshot v{} of {p} not written", s.version);
}

/// Refills until the pool needs nothing more: the list above low-water and a standby
/// batch built (what the refill job does every second).
pub(crate) async fn keep_filled(admin: &PoolAdmin, p: &PoolName) {
    for _ in 0..8 {
        match admin.refill(p).await.expect("refill") {
            RefillOutcome::Added { .. } | RefillOutcome::Raced => continue,
            RefillOutcome::NotNeeded => return,
        }
    }
    panic!("the pool still wanted batches after 8 refills");
}

/// One draw that must come from Redis.
#[track_caller]
fn from_redis(draw: Result<Draw, PoolError>) -> String {
    let draw = draw.expect("a draw");
    assert_eq!(draw.source, DrawSource::Redis, "{draw:?}");
    draw.member
}

/// `n` draws from Redis without refilling.
async fn draw_n(h: &Harness, p: &PoolName, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(from_redis(h.pools.draw(p).await));
    }
    out
}

/// `n` draws from Redis, the pool kept filled before each one.
async fn draw_filled(h: &Harness, p: &PoolName, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        keep_filled(&h.admin, p).await;
        out.push(from_redis(h.pools.draw(p).await));
    }
    out
}

pub(crate) fn tally<S: AsRef<str>>(members: &[S]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for m in members {
        *counts.entry(m.as_ref().to_owned()).or_insert(0) += 1;
    }
    counts
}

fn expected(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().filter(|(_, n)| *n > 0).map(|(m, n)| ((*m).to_owned(), *n)).collect()
}

/// What the engine's apportioner gives `weights` over `batches` batches of `size`.
pub(crate) fn apportioned(weights: &Weights, size: u32, batches: usize) -> BTreeMap<String, u64> {
    let mut a = Apportioner::new(weights.clone());
    let mut total = vec![0u64; weights.len()];
    for _ in 0..batches {
        for (t, c) in total.iter_mut().zip(a.next_counts(BatchSize::new(u64::from(size), 1 << 20).unwrap())) {
            *t += c;
        }
    }
    weights.members().iter().cloned().zip(total).filter(|(_, n)| *n > 0).collect()
}

fn lrange(key: &str) -> Vec<String> {
    redis::cmd("LRANGE").arg(key).arg(0).arg(-1).query(&mut raw_connection()).unwrap()
}

fn llen(key: &str) -> u64 {
    redis::cmd("LLEN").arg(key).query(&mut raw_connection()).unwrap()
}

fn hits(h: &Harness, p: &PoolName, day: &str) -> BTreeMap<String, u64> {
    redis::cmd("HGETALL").arg(h.keys().pool_hits(p.as_str(), day)).query(&mut raw_connection()).unwrap()
}

fn indices(w: &Weights, members: &[String]) -> Vec<usize> {
    members.iter().map(|m| w.index_of(m).unwrap_or_else(|| panic!("{m:?} is not a member"))).collect()
}

// ---------------------------------------------------------------------------------------
// 1. Concurrency
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_drawers_take_exactly_the_apportioned_counts_of_k_full_batches() {
    // Arrange: 45:30:25 in batches of 100; each round fills the list and the standby batch
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let s = snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth);
    publish(&h, &p, &s).await;
    let drawers: Vec<Pools> = (0..16).map(|_| h.client_at(&redis_url(), HashMap::new())).collect();
    let (rounds, per_round) = (2, 200);

    // Act: 16 clients, each on its own connection, draw every ticket of each round at once
    let mut draws: Vec<Draw> = Vec::new();
    for _ in 0..rounds {
        keep_filled(&h.admin, &p).await;
        assert_eq!(h.admin.length(&p).await.unwrap() + llen(&h.keys().pool_standby(p.as_str())), per_round as u64);
        let taken = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = drawers
            .iter()
            .map(|pools| {
                let (pools, p, taken) = (pools.clone(), p.clone(), taken.clone());
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    while taken.fetch_add(1, AtomicOrdering::SeqCst) < per_round {
                        mine.push(pools.draw(&p).await.expect("a draw"));
                    }
                    mine
                })
            })
            .collect();
        for task in tasks {
            draws.extend(task.await.unwrap());
        }
    }

    // Assert: k = 4 batches, 180/120/100 as the engine apportions them; nothing left over
    assert_eq!(draws.len(), rounds * per_round);
    assert!(draws.iter().all(|d| d.source == DrawSource::Redis && d.version == 1), "a draw left redis");
    let members: Vec<&str> = draws.iter().map(|d| d.member.as_str()).collect();
    assert_eq!(tally(&members), expected(&[("A", 180), ("B", 120), ("C", 100)]));
    assert_eq!(tally(&members), apportioned(&s.weights, 100, 4));
    assert_eq!(h.admin.length(&p).await.unwrap(), 0);
    assert_eq!(llen(&h.keys().pool_standby(p.as_str())), 0);
    assert_eq!(hits(&h, &p, "2030-03-15"), expected(&[("A", 180), ("B", 120), ("C", 100)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_draws_through_one_client_share_script_calls_and_take_every_ticket_once() {
    // Arrange: one client with metrics (to count its script calls), a pool of 45:30:25 in
    // batches of 100 with the list and the standby batch full: 200 tickets in Redis
    let h = harness(Clock::manual(noon()));
    let p = pool("coalesced");
    let s = snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let mut in_redis = lrange(&h.keys().pool_tickets(p.as_str()));
    in_redis.extend(lrange(&h.keys().pool_standby(p.as_str())));
    assert_eq!(in_redis.len(), 200);
    let registry = prometheus::Registry::new();
    let seconds =
        prometheus::HistogramVec::new(prometheus::HistogramOpts::new("script_seconds", "test"), &["script"]).unwrap();
    let metrics = client::PoolMetrics::register(&registry, seconds.clone()).unwrap();
    let pools = Pools::new(handle(&redis_url()), h.keys().clone(), h.clock.clone(), HashMap::new(), Some(metrics));

    // Act: 64 tasks draw the 200 tickets at once through that one client
    let taken = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (pools, p, taken) = (pools.clone(), p.clone(), taken.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                while taken.fetch_add(1, AtomicOrdering::SeqCst) < 200 {
                    mine.push(pools.draw(&p).await.expect("a draw"));
                }
                mine
            })
        })
        .collect();
    let mut draws: Vec<Draw> = Vec::new();
    for task in tasks {
        draws.extend(task.await.unwrap());
    }

    // Assert: exactly the tickets that were in Redis, each once, all from Redis, counted in
    // the day; and fewer script calls than draws (they were shared)
    assert_eq!(draws.len(), 200);
    assert!(draws.iter().all(|d| d.source == DrawSource::Redis), "a draw left redis");
    let members: Vec<&str> = draws.iter().map(|d| d.member.as_str()).collect();
    assert_eq!(tally(&members), tally(&in_redis));
    assert_eq!(tally(&members), expected(&[("A", 90), ("B", 60), ("C", 50)]));
    assert_eq!(h.admin.length(&p).await.unwrap() + llen(&h.keys().pool_standby(p.as_str())), 0);
    assert_eq!(hits(&h, &p, "2030-03-15"), expected(&[("A", 90), ("B", 60), ("C", 50)]));
    let ttl: i64 =
        redis::cmd("PTTL").arg(h.keys().pool_hits(p.as_str(), "2030-03-15")).query(&mut raw_connection()).unwrap();
    assert!(ttl > 0, "the day's hits expire (48 h after the day by the script's clock): {ttl}");
    let calls = seconds.with_label_values(&["draw_ticket"]).get_sample_count();
    assert!(calls < 200, "200 draws took {calls} script calls: none were shared");

    // With coalescing off, every draw is its own call
    keep_filled(&h.admin, &p).await;
    pools.set_coalescing(1);
    let before = seconds.with_label_values(&["draw_ticket"]).get_sample_count();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (pools, p) = (pools.clone(), p.clone());
            tokio::spawn(async move { pools.draw(&p).await.expect("a draw") })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().source, DrawSource::Redis);
    }
    assert_eq!(seconds.with_label_values(&["draw_ticket"]).get_sample_count() - before, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalesced_draws_that_outrun_the_tickets_fall_back_one_by_one_and_skip_ejected_members() {
    // Arrange: 20 tickets of A=3,B=1 in batches of 10 (list + standby), B ejected (a
    // small member: its tickets are skipped, not rebuilt away)
    let h = harness(Clock::manual(noon()));
    let p = pool("coalesced-short");
    let s = snapshot("A=3,B=1", 10, 1, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let mut in_redis = lrange(&h.keys().pool_tickets(p.as_str()));
    in_redis.extend(lrange(&h.keys().pool_standby(p.as_str())));
    let a_tickets = in_redis.iter().filter(|m| *m == "A").count();
    assert_eq!((in_redis.len(), a_tickets), (20, 15));
    let mut statics = HashMap::new();
    statics.insert(p.clone(), weights("A=1"));
    let pools = h.client_at(&redis_url(), statics);
    h.admin.eject(&p, "B").await.expect("eject B");

    // Act: 32 concurrent draws against 20 tickets, 5 of them B's
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (pools, p) = (pools.clone(), p.clone());
            tokio::spawn(async move { pools.draw(&p).await })
        })
        .collect();
    let mut draws = Vec::new();
    for task in tasks {
        draws.push(task.await.unwrap().expect("every draw is served by some level"));
    }

    // Assert: B never handed out; every A ticket handed out once from Redis; the other 17
    // draws served below Redis (the pool ran dry)
    assert!(draws.iter().all(|d| d.member == "A"), "{draws:?}");
    let from_redis = draws.iter().filter(|d| d.source == DrawSource::Redis).count();
    assert_eq!(from_redis, a_tickets, "{draws:?}");
    assert_eq!(h.admin.length(&p).await.unwrap() + llen(&h.keys().pool_standby(p.as_str())), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_refillers_at_low_water_add_exactly_one_batch() {
    // Arrange: a list of 100 with its standby batch, drawn down to 19 (low-water 20)
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    publish(&h, &p, &snapshot("A=5,B=3,C=2", 100, 20, Ordering::Smooth)).await;
    keep_filled(&h.admin, &p).await;
    draw_n(&h, &p, 81).await;
    let before = h.admin.length(&p).await.unwrap();
    let seq_before: u64 =
        redis::cmd("HGET").arg(h.keys().pool_state(p.as_str())).arg("seq").query(&mut raw_connection()).unwrap();
    assert_eq!(before, 19);
    assert!(h.admin.refill_flagged(&p).await.unwrap());

    // Act: 50 control-plane instances, each on its own connection, notice at once
    let admins: Vec<PoolAdmin> = (0..50).map(|_| h.admin_instance()).collect();
    let tasks: Vec<_> = admins
        .into_iter()
        .map(|admin| {
            let p = p.clone();
            tokio::spawn(async move { admin.refill(&p).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap().expect("a refill"));
    }

    // Assert
    let added: Vec<_> = outcomes.iter().filter(|o| matches!(o, RefillOutcome::Added { .. })).collect();
    assert_eq!(added.len(), 1, "{outcomes:?}");
    assert!(matches!(added[0], RefillOutcome::Added { mode: "append", tickets: 100, .. }), "{:?}", added[0]);
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, RefillOutcome::Added { .. } | RefillOutcome::Raced | RefillOutcome::NotNeeded)));
    assert_eq!(h.admin.length(&p).await.unwrap(), before + 100);
    assert_eq!(llen(&h.keys().pool_standby(p.as_str())), 100, "a standby batch is still ready");
    let seq_after: u64 =
        redis::cmd("HGET").arg(h.keys().pool_state(p.as_str())).arg("seq").query(&mut raw_connection()).unwrap();
    assert_eq!(seq_after, seq_before + 1);
    assert!(!h.admin.refill_flagged(&p).await.unwrap());
    assert_eq!(h.admin.refill(&p).await.unwrap(), RefillOutcome::NotNeeded);
}

// ---------------------------------------------------------------------------------------
// 2. Ordering across batch seams
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_smooth_pool_keeps_the_engines_window_bound_and_runs_across_batch_seams() {
    // Arrange: 5:3:2 in batches of 1024, low-water 128
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let s = snapshot("A=5,B=3,C=2", 1024, 128, Ordering::Smooth);
    publish(&h, &p, &s).await;
    let batches = 10;

    // Act: the refill job's rhythm for the first half (the list never runs dry), then a
    // job that falls behind (the standby batch is promoted when the list runs dry)
    let mut drawn = Vec::new();
    while drawn.len() < batches * 1024 {
        let behind = drawn.len() >= batches * 1024 / 2;
        let standby = llen(&h.keys().pool_standby(p.as_str())) > 0;
        if !behind || (!standby && h.admin.length(&p).await.unwrap() < 128) || drawn.len() % 1500 == 0 {
            keep_filled(&h.admin, &p).await;
        }
        drawn.extend(draw_n(&h, &p, 100.min(batches * 1024 - drawn.len())).await);
    }

    // Assert: exact counts, windows of 100 within the engine's bound, runs of A at most 3,
    // and no batch starts with the member its predecessor ended with
    let seq = indices(&s.weights, &drawn);
    assert_eq!(tally(&drawn), apportioned(&s.weights, 1024, batches));
    assert_eq!(tally(&drawn), expected(&[("A", 5120), ("B", 3072), ("C", 2048)]));
    let m = Metrics::compute(&seq, &s.weights.shares(), 100);
    let allowed = 2.0 + 100.0 / 1024.0;
    assert!(m.max_window_dev < allowed, "window deviation {} ≥ {allowed}", m.max_window_dev);
    assert!(m.max_run[0] <= 3, "longest run of A is {}", m.max_run[0]);
    for seam in (1..batches).map(|k| k * 1024) {
        assert_ne!(seq[seam], seq[seam - 1], "the batch starting at draw {seam} continues its predecessor's run");
    }
}

#[tokio::test]
async fn an_append_of_a_staged_batch_onto_a_long_list_keeps_the_order_draws_see() {
    // Arrange: batches of 4,000 (staged: above client::pool::STAGE_ABOVE), low-water
    // 3,000; a standby batch built, the list drawn to 2,999 (above what an append copies).
    let h = harness(Clock::manual(noon()));
    let p = pool("big-append");
    let s = snapshot("A=5,B=3,C=2", 4000, 3000, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let (tickets_key, standby_key) = (h.keys().pool_tickets(p.as_str()), h.keys().pool_standby(p.as_str()));
    assert_eq!((llen(&tickets_key), llen(&standby_key)), (4000, 4000));
    draw_n(&h, &p, 1001).await;
    let before: Vec<String> = lrange(&tickets_key).into_iter().chain(lrange(&standby_key)).collect();
    assert_eq!(before.len(), 6999);

    // Act: the append (the list's tail shifted onto the standby batch in steps, then the
    // standby batch moved onto the list and the new batch made the standby one).
    assert!(matches!(h.admin.refill(&p).await.unwrap(), RefillOutcome::Added { mode: "append", .. }));

    // Assert: the list is the old list then the old standby batch, in order; the new batch
    // waits as the standby batch, whole.
    assert_eq!(lrange(&tickets_key), before);
    assert_eq!(tally(&lrange(&standby_key)), expected(&[("A", 2000), ("B", 1200), ("C", 800)]));
    let ttl: i64 = redis::cmd("PTTL").arg(&standby_key).query(&mut raw_connection()).unwrap();
    assert_eq!(ttl, -1, "the staged list's expiry does not follow it into place");
}

#[tokio::test]
async fn a_commit_whose_staged_batch_expired_writes_nothing_and_says_stale() {
    // Arrange: a pool with its list and standby batch, and a staging list that is gone.
    let h = harness(Clock::manual(noon()));
    let p = pool("staged-gone");
    publish(&h, &p, &snapshot("A=1,B=1", 20, 5, Ordering::Smooth)).await;
    keep_filled(&h.admin, &p).await;
    let k = h.keys();
    let (tickets, standby) = (lrange(&k.pool_tickets(p.as_str())), lrange(&k.pool_standby(p.as_str())));
    let seq: Option<String> =
        redis::cmd("HGET").arg(k.pool_state(p.as_str())).arg("seq").query(&mut raw_connection()).unwrap();

    // Act: the commit of an append whose staged list expired.
    let reply: Vec<redis::Value> = client::scripts::pool()
        .refill
        .key(k.pool_meta(p.as_str()))
        .key(k.pool_state(p.as_str()))
        .key(k.pool_tickets(p.as_str()))
        .key(k.pool_standby(p.as_str()))
        .key(k.pool_refill_flag(p.as_str()))
        .key(format!("{}:staging:gone", k.pool_tickets(p.as_str())))
        .arg(1)
        .arg(seq.clone().unwrap_or_else(|| "0".into()))
        .arg("append")
        .arg("{}")
        .arg("seq")
        .arg("apportioner")
        .invoke(&mut raw_connection())
        .unwrap();

    // Assert: stale, and the list, the standby batch and the sequence as they were.
    assert_eq!(reply.first(), Some(&redis::Value::BulkString(b"stale".to_vec())), "{reply:?}");
    assert_eq!(lrange(&k.pool_tickets(p.as_str())), tickets);
    assert_eq!(lrange(&k.pool_standby(p.as_str())), standby);
    let after: Option<String> =
        redis::cmd("HGET").arg(k.pool_state(p.as_str())).arg("seq").query(&mut raw_connection()).unwrap();
    assert_eq!(after, seq);
}

#[tokio::test]
async fn the_tail_shift_stops_when_the_standby_batch_is_gone_or_another_refiller_was_first() {
    // Arrange: a list of 1,200 and a standby batch of 20, at batch sequence 7.
    let h = harness(Clock::manual(noon()));
    let k = h.keys();
    let (tickets, standby, state) = (k.pool_tickets("shift"), k.pool_standby("shift"), k.pool_state("shift"));
    let list: Vec<String> = (0..1200).map(|i| format!("L{i}")).collect();
    let batch: Vec<String> = (0..20).map(|i| format!("S{i}")).collect();
    let mut conn = raw_connection();
    let _: () = redis::cmd("RPUSH").arg(&tickets).arg(&list).query(&mut conn).unwrap();
    let _: () = redis::cmd("RPUSH").arg(&standby).arg(&batch).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET").arg(&state).arg("seq").arg(7).query(&mut conn).unwrap();
    let shift = |seq: u64| {
        let mut conn = raw_connection();
        client::scripts::pool()
            .shift_tail
            .key(&tickets)
            .key(&standby)
            .key(&state)
            .arg(500)
            .arg(500)
            .arg("seq")
            .arg(seq)
            .invoke::<i64>(&mut conn)
            .unwrap()
    };

    // Act, assert: 500, then 200 (down to 500 left), then none; the order draws see kept.
    assert_eq!((shift(7), shift(7), shift(7)), (500, 200, 0));
    let seen: Vec<String> = lrange(&tickets).into_iter().chain(lrange(&standby)).collect();
    assert_eq!(seen, list.iter().chain(&batch).cloned().collect::<Vec<_>>());
    // Another refiller added a batch (the sequence moved on): nothing to shift.
    assert_eq!(shift(6), -1);
    // The standby batch was promoted by a draw: nothing to shift, whatever the list holds.
    let _: () = redis::cmd("DEL").arg(&standby).query(&mut conn).unwrap();
    assert_eq!(shift(7), -1);
    let _: () = redis::cmd("DEL").arg(&tickets).arg(&state).query(&mut conn).unwrap();
}

#[tokio::test]
async fn every_seam_is_guarded_also_when_a_standby_batch_is_promoted_after_an_append() {
    // Arrange: 5:3:2 in batches of 20, low-water 5
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let s = snapshot("A=5,B=3,C=2", 20, 5, Ordering::Smooth);
    publish(&h, &p, &s).await;
    let standby_key = h.keys().pool_standby(p.as_str());
    let cycles = 40;

    // Act: each cycle, a standby batch is built; the list is drawn below low-water and
    // gets one appended batch; then the list runs dry and the standby batch is promoted
    let mut drawn = Vec::new();
    for _ in 0..cycles {
        keep_filled(&h.admin, &p).await;
        assert!(llen(&standby_key) > 0);
        while h.admin.length(&p).await.unwrap() >= 5 {
            drawn.extend(draw_n(&h, &p, 1).await);
        }
        assert!(matches!(h.admin.refill(&p).await.unwrap(), RefillOutcome::Added { mode: "append", .. }));
        while h.admin.length(&p).await.unwrap() > 0 {
            drawn.extend(draw_n(&h, &p, 1).await);
        }
        if llen(&standby_key) > 0 {
            drawn.extend(draw_n(&h, &p, 1).await);
        }
    }
    let rest = h.admin.length(&p).await.unwrap() as usize + llen(&standby_key) as usize;
    drawn.extend(draw_n(&h, &p, rest).await);

    // Assert: the drawn sequence is whole batches of 10/6/4 whose seams never continue a run
    assert_eq!(drawn.len() % 20, 0);
    let seq = indices(&s.weights, &drawn);
    for (k, batch) in drawn.chunks(20).enumerate() {
        assert_eq!(tally(batch), expected(&[("A", 10), ("B", 6), ("C", 4)]), "batch {k}");
    }
    let continued: Vec<usize> = (1..seq.len() / 20).map(|k| k * 20).filter(|&i| seq[i] == seq[i - 1]).collect();
    assert!(
        continued.is_empty(),
        "{} of {} seams continue a run, at draws {continued:?}",
        continued.len(),
        seq.len() / 20 - 1
    );
}

// ---------------------------------------------------------------------------------------
// 3. The script cache
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_script_flush_between_draws_reaches_no_caller() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    publish(&h, &p, &snapshot("A=5,B=3,C=2", 10, 2, Ordering::Smooth)).await;
    let first = from_redis(h.pools.draw(&p).await);
    let flush = || redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut raw_connection()).unwrap();

    // Act
    flush();
    let second = h.pools.draw(&p).await;
    flush();
    let sticky = h.pools.draw_sticky(&p, b"user-1").await;
    flush();
    let refill = h.admin.refill(&p).await;

    // Assert
    let second = from_redis(second);
    let sticky = from_redis(sticky);
    assert!(matches!(refill, Ok(RefillOutcome::Added { mode: "standby", .. })), "{refill:?}");
    assert_eq!(h.admin.length(&p).await.unwrap(), 8);
    let day = hits(&h, &p, "2030-03-15");
    assert_eq!(day.values().sum::<u64>(), 3);
    assert_eq!(day, tally(&[first, second, sticky]));
}

// ---------------------------------------------------------------------------------------
// 4. Redis unreachable
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn without_redis_draws_fall_to_the_local_pool_then_static_weights_then_unavailable_and_return_to_redis() {
    // Arrange: a client that drew once through the proxy (so it holds the snapshot).
    // Small batches: while Redis is away each draw first waits out two reconnect attempts.
    let proxy = Proxy::start(redis_address()).await;
    let proxied = through(&redis_url(), proxy.addr());
    let h = harness_at(&proxied, Clock::manual(noon()));
    let p = pool("cn-pay");
    publish(&h, &p, &snapshot("A=3,B=2", 5, 1, Ordering::Smooth)).await;
    from_redis(h.pools.draw(&p).await);
    let statics = HashMap::from([(p.clone(), weights("A=3,B=2"))]);
    let with_statics = h.client_at(&proxied, statics);
    let bare = h.client_at(&proxied, HashMap::new());

    // Act: Redis goes away
    proxy.cut().await;
    let mut local = Vec::new();
    for _ in 0..10 {
        local.push(h.pools.draw(&p).await.expect("a local draw"));
    }
    let mut fallback = Vec::new();
    for _ in 0..2 {
        fallback.push(with_statics.draw(&p).await.expect("a static draw"));
    }
    let refused = bare.draw(&p).await;

    // Assert: the local pool is exact per batch of 5; Redis's list was not touched
    assert!(local.iter().all(|d| d.source == DrawSource::Local && d.version == 1), "{local:?}");
    for batch in local.chunks(5) {
        let members: Vec<&str> = batch.iter().map(|d| d.member.as_str()).collect();
        assert_eq!(tally(&members), expected(&[("A", 3), ("B", 2)]));
    }
    assert!(fallback.iter().all(|d| d.source == DrawSource::Static && d.version == 0), "{fallback:?}");
    assert!(fallback.iter().all(|d| ["A", "B"].contains(&d.member.as_str())));
    match refused {
        Err(PoolError::Unavailable { pool, .. }) => assert_eq!(pool, p),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(h.admin.length(&p).await.unwrap(), 4);

    // Act: Redis is back (after longer than one reconnect attempt)
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.restore();
    // After a failed attempt the client skips Redis for 500 ms, so it is retried at a
    // pace: back within 4 s, however slow this machine is.
    let mut sources = Vec::new();
    for _ in 0..20 {
        let d = h.pools.draw(&p).await.expect("a draw");
        sources.push(d.source);
        if d.source == DrawSource::Redis {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let then = from_redis(h.pools.draw(&p).await);

    // Assert: served locally meanwhile, then Redis again
    assert_eq!(sources.last(), Some(&DrawSource::Redis), "{sources:?}");
    assert!(sources.iter().all(|s| *s != DrawSource::Static), "{sources:?}");
    assert!(["A", "B"].contains(&then.as_str()));
    assert_eq!(h.admin.length(&p).await.unwrap(), 4 - 2, "exactly the two Redis draws took tickets");
}

// ---------------------------------------------------------------------------------------
// 5. Days
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn draws_count_in_the_pools_local_day_across_midnight_and_the_days_hits_expire_48_hours_after_it() {
    // Arrange: Singapore is UTC+8; local midnight of 2030-03-16 is 2030-03-15T16:00Z
    let h = harness(Clock::manual(at("2030-03-15T15:59:00Z")));
    let p = pool("sg-pay");
    publish(&h, &p, &snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth)).await;
    let state: BTreeMap<String, String> =
        redis::cmd("HGETALL").arg(h.keys().pool_state(p.as_str())).query(&mut raw_connection()).unwrap();

    // Act: three draws at 23:59:59 and two at 00:00:01, no rotation in between
    h.clock.set(at("2030-03-15T15:59:59Z"));
    let before = draw_n(&h, &p, 3).await;
    h.clock.set(at("2030-03-15T16:00:01Z"));
    let after = draw_n(&h, &p, 2).await;

    // Assert
    let ms = |t: &str| at(t).timestamp_millis();
    assert_eq!(state["day0"], "2030-03-15");
    assert_eq!(state["day0_end"], ms("2030-03-15T16:00:00Z").to_string());
    assert_eq!(state["day1"], "2030-03-16");
    assert_eq!(state["day1_end"], ms("2030-03-16T16:00:00Z").to_string());
    assert_eq!(hits(&h, &p, "2030-03-15"), tally(&before));
    assert_eq!(hits(&h, &p, "2030-03-16"), tally(&after));
    let expire_at = |day: &str| -> i64 {
        redis::cmd("PEXPIRETIME").arg(h.keys().pool_hits(p.as_str(), day)).query(&mut raw_connection()).unwrap()
    };
    assert_eq!(expire_at("2030-03-15"), ms("2030-03-17T16:00:00Z"));
    assert_eq!(expire_at("2030-03-16"), ms("2030-03-18T16:00:00Z"));

    // Act: past the next day with no rotation, then the rotation job runs
    h.clock.set(at("2030-03-17T16:30:00Z"));
    let stale = h.pools.draw(&p).await.expect("a draw without a current day");
    let days = h.admin.rotate(&p).await.expect("rotate");
    let rotated = draw_n(&h, &p, 1).await;

    // Assert: without a current day the draw is served locally; the rotation writes the
    // new days and draws count in the new day
    assert_eq!(stale.source, DrawSource::Local);
    assert_eq!(days.today.to_string(), "2030-03-18");
    assert_eq!(days.today_ends, at("2030-03-18T16:00:00Z"));
    assert_eq!(days.tomorrow.to_string(), "2030-03-19");
    assert_eq!(days.tomorrow_ends, at("2030-03-19T16:00:00Z"));
    assert_eq!(hits(&h, &p, "2030-03-18"), tally(&rotated));
    assert_eq!(expire_at("2030-03-18"), ms("2030-03-20T16:00:00Z"));
    assert_eq!(hits(&h, &p, "2030-03-16"), tally(&after), "an old day is not counted in again");
}

#[tokio::test]
async fn a_capped_member_stops_at_exactly_its_cap_for_the_day_and_is_drawable_again_the_next_local_day() {
    // Arrange: C would get 20 of every 100 tickets; its cap is 7 a day
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let s = PoolSnapshot {
        caps: BTreeMap::from([("C".to_owned(), 7)]),
        ..snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth)
    };
    publish(&h, &p, &s).await;

    // Act
    let today = draw_filled(&h, &p, 100).await;
    h.clock.set(at("2030-03-16T04:00:00Z"));
    let tomorrow = draw_filled(&h, &p, 100).await;

    // Assert
    let (t1, t2) = (tally(&today), tally(&tomorrow));
    assert_eq!(t1["C"], 7, "{t1:?}");
    assert_eq!(t1["A"] + t1["B"], 93, "{t1:?}");
    assert!(!today[today.iter().rposition(|m| m == "C").unwrap() + 1..].is_empty(), "others go on after the cap");
    assert_eq!(hits(&h, &p, "2030-03-15"), t1);
    assert_eq!(t2["C"], 7, "{t2:?}");
    assert_eq!(t2["A"] + t2["B"], 93, "{t2:?}");
    assert_eq!(hits(&h, &p, "2030-03-16"), t2);
}

#[tokio::test]
async fn a_list_that_runs_out_on_capped_tickets_is_exhausted_never_served_past_the_caps() {
    // Arrange: two members each capped at one draw a day; a list and a standby batch of 10
    let h = harness(Clock::manual(noon()));
    let p = pool("capped-out");
    let s = PoolSnapshot {
        caps: BTreeMap::from([("A".to_owned(), 1), ("B".to_owned(), 1)]),
        ..snapshot("A=1,B=1", 10, 1, Ordering::Smooth)
    };
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;

    // Act
    let first = draw_n(&h, &p, 2).await;
    let third = h.pools.draw(&p).await;

    // Assert: the 18 tickets left are of capped members: refused by name, not handed out
    // by the local pool (which knows no caps)
    assert_eq!(tally(&first), expected(&[("A", 1), ("B", 1)]));
    match third {
        Err(PoolError::Exhausted { skipped_capped, .. }) => assert_eq!(skipped_capped, 18),
        other => panic!("expected exhausted, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// 6. Ejection
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn ejecting_a_small_member_skips_its_tickets_and_restoring_it_brings_it_back_in_the_next_batches() {
    // Arrange: C holds 10% (rebuild above 50%); list and standby filled
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    publish(&h, &p, &snapshot("A=70,B=20,C=10", 100, 10, Ordering::Smooth)).await;
    keep_filled(&h.admin, &p).await;
    let tickets_key = h.keys().pool_tickets(p.as_str());

    // Act
    let outcome = h.admin.eject(&p, "C").await.expect("eject");
    let list_after_eject = lrange(&tickets_key);
    let while_ejected = draw_filled(&h, &p, 300).await;

    // Assert: skipped, not rebuilt
    assert!(!outcome.rebuilt);
    assert_eq!(outcome.ejected_percent, 10.0);
    assert_eq!(tally(&list_after_eject)["C"], 10, "the list keeps C's tickets: they are skipped");
    assert!(!while_ejected.iter().any(|m| m == "C"));

    // Act: restore, draw out everything built while C was ejected, then refill
    h.admin.restore(&p, "C").await.expect("restore");
    let rest = h.admin.length(&p).await.unwrap() as usize + llen(&h.keys().pool_standby(p.as_str())) as usize;
    draw_n(&h, &p, rest).await;
    keep_filled(&h.admin, &p).await;
    let next_batch = lrange(&tickets_key);
    let after_restore = draw_n(&h, &p, 100).await;

    // Assert
    assert_eq!(tally(&next_batch), expected(&[("A", 70), ("B", 20), ("C", 10)]));
    assert_eq!(after_restore, next_batch);
}

#[tokio::test]
async fn ejecting_the_dominant_member_rebuilds_the_pool_without_it_and_restoring_it_brings_it_back() {
    // Arrange: A holds 70% (rebuild above 50%); list and standby filled
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    publish(&h, &p, &snapshot("A=70,B=20,C=10", 100, 10, Ordering::Smooth)).await;
    keep_filled(&h.admin, &p).await;
    draw_n(&h, &p, 30).await;
    let tickets_key = h.keys().pool_tickets(p.as_str());

    // Act
    let outcome = h.admin.eject(&p, "A").await.expect("eject");
    let rebuilt = lrange(&tickets_key);
    let standby_after = llen(&h.keys().pool_standby(p.as_str()));
    let while_ejected = draw_filled(&h, &p, 300).await;

    // Assert: the remaining tickets and the standby batch were replaced by one batch of B and C
    assert!(outcome.rebuilt);
    assert_eq!(outcome.ejected_percent, 70.0);
    assert_eq!(rebuilt.len(), 100);
    assert_eq!(tally(&rebuilt), apportioned(&weights("A=0,B=20,C=10"), 100, 1));
    assert_eq!(tally(&rebuilt), expected(&[("B", 67), ("C", 33)]));
    assert_eq!(standby_after, 0);
    assert!(!while_ejected.iter().any(|m| m == "A"));
    assert_eq!(tally(&while_ejected)["B"] + tally(&while_ejected)["C"], 300);

    // Act: restore, draw out everything built while A was ejected, then refill
    h.admin.restore(&p, "A").await.expect("restore");
    let rest = h.admin.length(&p).await.unwrap() as usize + llen(&h.keys().pool_standby(p.as_str())) as usize;
    let drained = draw_n(&h, &p, rest).await;
    keep_filled(&h.admin, &p).await;
    let after_restore = draw_n(&h, &p, 100).await;

    // Assert
    assert!(!drained.iter().any(|m| m == "A"));
    assert_eq!(tally(&after_restore), expected(&[("A", 70), ("B", 20), ("C", 10)]));
}

// ---------------------------------------------------------------------------------------
// 7. Sticky draws
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn sticky_draws_keep_their_member_move_few_keys_when_one_weight_changes_and_count_in_the_day() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let v1 = snapshot("A=50,B=30,C=20", 100, 10, Ordering::Smooth);
    publish(&h, &p, &v1).await;
    let keys: Vec<String> = (0..1000).map(|i| format!("user-{i}")).collect();

    // Act: the same key five times, then 1000 keys, then a new version (A 50 → 60)
    let mut repeated = Vec::new();
    for _ in 0..5 {
        repeated.push(from_redis(h.pools.draw_sticky(&p, b"user-7").await));
    }
    let mut first = Vec::new();
    for k in &keys {
        first.push(from_redis(h.pools.draw_sticky(&p, k.as_bytes()).await));
    }
    let v2 = PoolSnapshot { version: 2, weights: weights("A=60,B=30,C=20"), ..v1.clone() };
    publish(&h, &p, &v2).await;
    let mut second = Vec::new();
    for k in &keys {
        second.push(from_redis(h.pools.draw_sticky(&p, k.as_bytes()).await));
    }

    // Assert: the rings of each version, as the engine builds them
    let ring1 = HashRing::new(&v1.weights, 160);
    let ring2 = HashRing::new(&v2.weights, 160);
    assert!(repeated.iter().all(|m| m == ring1.lookup_name(b"user-7")), "{repeated:?}");
    let ring_first: Vec<&str> = keys.iter().map(|k| ring1.lookup_name(k.as_bytes())).collect();
    let ring_second: Vec<&str> = keys.iter().map(|k| ring2.lookup_name(k.as_bytes())).collect();
    let off_ring = |drawn: &[String], ring: &[&str]| drawn.iter().zip(ring).filter(|(d, r)| d != r).count();
    assert_eq!(off_ring(&first, &ring_first), 0);
    assert_eq!(off_ring(&second[1..], &ring_second[1..]), 0, "after the first draw that sees version 2");
    let moved = first.iter().zip(&second).filter(|(a, b)| a != b).count();
    assert!(moved > 0, "no key moved to the new weights");
    assert!(moved < 350, "{moved} of 1000 keys moved for one weight changed by 20%");
    let mut all = repeated.clone();
    all.extend(first.iter().cloned());
    all.extend(second.iter().cloned());
    assert_eq!(hits(&h, &p, "2030-03-15"), tally(&all));
    assert_eq!(h.admin.length(&p).await.unwrap(), 100, "sticky draws take no ticket");
}

// ---------------------------------------------------------------------------------------
// 8. Publishing
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_older_snapshot_never_replaces_a_newer_one() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let p = pool("cn-pay");
    let v1 = snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth);
    let v2 = PoolSnapshot { version: 2, weights: weights("A=1,B=1"), ..v1.clone() };
    publish(&h, &p, &v2).await;

    // Act
    let older = h.admin.publish(&p, &v1).await.expect("publish v1");
    let same = h.admin.publish(&p, &v2).await.expect("publish v2 again");

    // Assert
    assert!(!older);
    assert!(!same);
    assert_eq!(h.admin.snapshot(&p).await.unwrap(), Some(v2));
    let list = lrange(&h.keys().pool_tickets(p.as_str()));
    assert_eq!(tally(&list), expected(&[("A", 50), ("B", 50)]));
}

#[tokio::test]
async fn an_invalid_snapshot_is_refused_naming_the_field_and_nothing_is_written() {
    // Arrange: one pool already published, one never published
    let h = harness(Clock::manual(noon()));
    let (published, fresh) = (pool("cn-pay"), pool("cn-new"));
    let good = snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth);
    publish(&h, &published, &good).await;
    let keys_before: HashSet<String> = h.guard.all_keys().into_iter().collect();
    let bad = [
        ("low_water", PoolSnapshot { version: 2, low_water: 100, ..good.clone() }),
        ("timezone", PoolSnapshot { version: 2, timezone: "Mars/Olympus_Mons".to_owned(), ..good.clone() }),
        ("caps", PoolSnapshot { version: 2, caps: BTreeMap::from([("Z".to_owned(), 5)]), ..good.clone() }),
        ("batch_size", PoolSnapshot { version: 2, batch_size: 0, low_water: 0, ..good.clone() }),
        ("eject_rebuild_percent", PoolSnapshot { version: 2, eject_rebuild_percent: 0, ..good.clone() }),
        ("version", PoolSnapshot { version: 0, ..good.clone() }),
    ];

    // Act
    let mut refusals = Vec::new();
    for (field, s) in &bad {
        for p in [&published, &fresh] {
            refusals.push((*field, h.admin.publish(p, s).await));
        }
    }
    let all_zero = serde_json::from_value::<PoolSnapshot>(serde_json::json!({
        "version": 2, "weights": [{"member": "A", "weight": 0}, {"member": "B", "weight": 0}],
        "batch_size": 100, "low_water": 10, "ordering": "smooth", "timezone": SINGAPORE,
        "eject_rebuild_percent": 50,
    }));

    // Assert
    for (field, outcome) in refusals {
        match outcome {
            Err(PoolError::Invalid(e)) => assert_eq!(e.field, field, "{e:?}"),
            other => panic!("{field}: expected Invalid, got {other:?}"),
        }
    }
    let err = all_zero.expect_err("all-zero weights cannot make a snapshot");
    assert!(err.to_string().contains("every member has weight 0"), "{err}");
    assert_eq!(Weights::from_integers([("A", 0u64), ("B", 0)]), Err(engine::WeightError::AllZero));
    assert_eq!(h.admin.snapshot(&published).await.unwrap(), Some(good));
    assert_eq!(h.admin.snapshot(&fresh).await.unwrap(), None);
    let keys_after: HashSet<String> = h.guard.all_keys().into_iter().collect();
    assert_eq!(keys_after, keys_before);
}

#[tokio::test]
async fn a_drain_reweight_changes_the_next_batch_and_an_immediate_one_replaces_the_remaining_tickets() {
    // Arrange: A=1,B=1 in batches of 20, one batch in the list.
    let h = harness(Clock::manual(noon()));
    let p = pool("reweighted");
    publish(&h, &p, &snapshot("A=1,B=1", 20, 5, Ordering::Smooth)).await;
    let tickets = h.keys().pool_tickets(p.as_str());
    assert_eq!(tally(&lrange(&tickets)), expected(&[("A", 10), ("B", 10)]));

    // Act: drain to A=3,B=1.
    let mut v2 = snapshot("A=3,B=1", 20, 5, Ordering::Smooth);
    v2.version = 2;
    assert!(h.admin.reweight(&p, &v2, client::pool::ReweightMode::Drain).await.unwrap());

    // Assert: the list is untouched; the batch built next (the standby) has the new weights.
    assert_eq!(tally(&lrange(&tickets)), expected(&[("A", 10), ("B", 10)]));
    let standby = h.keys().pool_standby(p.as_str());
    assert_eq!(tally(&lrange(&standby)), expected(&[("A", 15), ("B", 5)]));

    // Act: immediate to A=1,B=3.
    let mut v3 = snapshot("A=1,B=3", 20, 5, Ordering::Smooth);
    v3.version = 3;
    assert!(h.admin.reweight(&p, &v3, client::pool::ReweightMode::Immediate).await.unwrap());

    // Assert: the remaining tickets and the standby batch were replaced by one new batch.
    assert_eq!(tally(&lrange(&tickets)), expected(&[("A", 5), ("B", 15)]));
    assert_eq!(llen(&standby), 0);
    let drawn = draw_n(&h, &p, 20).await;
    assert_eq!(tally(&drawn), expected(&[("A", 5), ("B", 15)]));
}

#[tokio::test]
async fn the_lua_tier_mapping_matches_the_engines_whole_truth_table() {
    // Arrange: the pool scripts' shared prelude, with a body that only maps.
    let script = redis::Script::new(&format!(
        "{}\nlocal avail = {{G = ARGV[2] == '1', N = ARGV[3] == '1', U = ARGV[4] == '1'}}\nreturn tier_fallback(ARGV[1], avail) or ''",
        include_str!("../../../lua/pool_lib.lua")
    ));
    let mut conn = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();

    for drawn in engine::Tier::ALL {
        for mask in 0..8u8 {
            let available = [mask & 1 != 0, mask & 2 != 0, mask & 4 != 0];
            // Act
            let lua: String = script
                .arg(drawn.as_str())
                .arg(if available[0] { "1" } else { "0" })
                .arg(if available[1] { "1" } else { "0" })
                .arg(if available[2] { "1" } else { "0" })
                .invoke_async(&mut conn)
                .await
                .unwrap();
            // Assert
            let engine = engine::tier::fallback(drawn, available).map(|t| t.as_str().to_owned()).unwrap_or_default();
            assert_eq!(lua, engine, "drawn {drawn}, available G/N/U = {available:?}");
        }
    }
}

fn tiers_snapshot() -> PoolSnapshot {
    let mut s = snapshot("G=6,N=3,U=1", 20, 5, Ordering::Smooth);
    s.kind = PoolKind::Tiers;
    s.tiers = [
        (engine::Tier::G, weights("GA=1,GB=1")),
        (engine::Tier::N, weights("NA=1")),
        (engine::Tier::U, weights("UA=1")),
    ]
    .into_iter()
    .collect();
    s
}

#[tokio::test]
async fn a_tiers_pool_draws_a_tier_then_a_channel_of_it_in_one_call_and_maps_a_tier_with_no_channel_left() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let p = pool("tiered");
    publish(&h, &p, &tiers_snapshot()).await;
    keep_filled(&h.admin, &p).await;

    // Act: one batch of tier tickets (20: 12 G, 6 N, 2 U).
    let mut by_tier: BTreeMap<String, u64> = BTreeMap::new();
    let mut channels = Vec::new();
    for _ in 0..20 {
        let draw = h.pools.draw(&p).await.unwrap();
        assert_eq!(draw.source, DrawSource::Redis);
        *by_tier.entry(draw.tier.clone().expect("a tier")).or_default() += 1;
        channels.push(draw.member);
    }

    // Assert: tiers by the tier weights, channels from their own tier.
    assert_eq!(by_tier, expected(&[("G", 12), ("N", 6), ("U", 2)]));
    assert_eq!(tally(&channels), expected(&[("GA", 6), ("GB", 6), ("NA", 6), ("UA", 2)]));

    // Act: eject U's only channel (U's list goes with it); its tickets now map to G.
    h.admin.eject(&p, "UA").await.unwrap();
    keep_filled(&h.admin, &p).await;
    let mut served = Vec::new();
    for _ in 0..40 {
        let draw = h.pools.draw(&p).await.unwrap();
        served.push((draw.tier.clone().unwrap(), draw.member.clone()));
        keep_filled(&h.admin, &p).await;
    }

    // Assert: nothing from UA; every channel belongs to the tier said to serve it.
    assert!(served.iter().all(|(_, m)| m != "UA"), "{served:?}");
    for (tier, member) in &served {
        let expected_tier = if member.starts_with('G') { "G" } else { "N" };
        assert_eq!(tier, expected_tier, "{member} served as tier {tier}");
    }
    assert_eq!(
        llen(&h.keys().pool_tier_tickets(p.as_str(), "U")),
        0,
        "a tier with every channel ejected is not refilled"
    );
}

/// A tiers pool whose lists hold more of tier U's only channel than a draw may skip
/// (batches of 200, one in the list and one standby per lane, against the 64 tickets
/// `client::pool::MAX_SKIPS` lets a draw skip).
fn large_tiers_snapshot() -> PoolSnapshot {
    let mut s = tiers_snapshot();
    s.batch_size = 200;
    s.low_water = 50;
    s
}

/// `n` draws without refilling: (serving tier, channel) of each, and the errors. One
/// script call per draw (no coalescing), so each answer is the draw script's own: a
/// coalesced draw whose shared call found nothing tries again alone, on the next ticket.
async fn draw_tiers(h: &Harness, p: &PoolName, n: usize) -> (Vec<(String, String)>, Vec<String>) {
    h.pools.set_coalescing(1);
    let (mut served, mut failed) = (Vec::new(), Vec::new());
    for _ in 0..n {
        match h.pools.draw(p).await {
            Ok(draw) => served.push((draw.tier.clone().expect("a tier"), draw.member)),
            Err(e) => failed.push(e.to_string()),
        }
    }
    (served, failed)
}

#[tokio::test]
async fn ejecting_the_last_channel_of_a_tier_maps_its_tickets_to_another_tier_at_once() {
    // Arrange: U's lane holds 400 tickets of UA (list and standby).
    let h = harness(Clock::manual(noon()));
    let p = pool("tier-eject");
    publish(&h, &p, &large_tiers_snapshot()).await;
    keep_filled(&h.admin, &p).await;
    let (u_list, u_standby) =
        (h.keys().pool_tier_tickets(p.as_str(), "U"), h.keys().pool_tier_standby(p.as_str(), "U"));
    assert_eq!(llen(&u_list) + llen(&u_standby), 400);

    // Act: eject UA, then draw a whole batch of tier tickets (20 of them U) without refills.
    let outcome = h.admin.eject(&p, "UA").await.expect("eject");
    let lane_after_eject = llen(&u_list) + llen(&u_standby);
    let (served, failed) = draw_tiers(&h, &p, 200).await;

    // Assert: U's lane went with its last channel; every draw answered, U's as tier G.
    assert!(!outcome.rebuilt, "UA holds 10%: its tickets would only be skipped");
    assert!(failed.is_empty(), "{} of 200 draws failed, the first: {}", failed.len(), failed[0]);
    assert_eq!(lane_after_eject, 0, "U's list and standby batch are dropped with its last channel");
    assert!(served.iter().all(|(_, m)| m != "UA"), "{served:?}");
    assert_eq!(tally(&served.iter().map(|(t, _)| t).collect::<Vec<_>>()), expected(&[("G", 140), ("N", 60)]));

    // Act: restore UA, then draw another batch.
    h.admin.restore(&p, "UA").await.expect("restore");
    keep_filled(&h.admin, &p).await;
    let (served, failed) = draw_tiers(&h, &p, 200).await;

    // Assert: U serves from UA again.
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(served.iter().filter(|(t, m)| t == "U" && m == "UA").count(), 20);
}

#[tokio::test]
async fn a_published_snapshot_that_ejects_a_tiers_last_channel_maps_its_tickets_at_once() {
    // Arrange: U's lane holds 400 tickets of UA (list and standby).
    let h = harness(Clock::manual(noon()));
    let p = pool("tier-publish");
    let mut s = large_tiers_snapshot();
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;

    // Act: the control plane's way to eject (a health decision, a pin, the admin API): a
    // new snapshot naming UA ejected.
    s.version = 2;
    s.ejected = ["UA".to_owned()].into_iter().collect();
    publish(&h, &p, &s).await;
    let lane_after_publish =
        llen(&h.keys().pool_tier_tickets(p.as_str(), "U")) + llen(&h.keys().pool_tier_standby(p.as_str(), "U"));
    let (served, failed) = draw_tiers(&h, &p, 200).await;

    // Assert
    assert!(failed.is_empty(), "{} of 200 draws failed, the first: {}", failed.len(), failed[0]);
    assert_eq!(lane_after_publish, 0, "U's list and standby batch are dropped with its last channel");
    assert!(served.iter().all(|(_, m)| m != "UA"), "{served:?}");
}

/// A tiers pool G=60 (GA, GB) / N=40 (NA), batches of 100 per lane.
fn capped_tiers_snapshot() -> PoolSnapshot {
    let mut s = snapshot("G=60,N=40", 100, 20, Ordering::Smooth);
    s.kind = PoolKind::Tiers;
    s.tiers = [(engine::Tier::G, weights("GA=1,GB=1")), (engine::Tier::N, weights("NA=1"))].into_iter().collect();
    s
}

/// Draws `n` times, refilling after each draw: (serving tier, channel) of each, and the
/// errors.
async fn draw_tiers_filled(h: &Harness, p: &PoolName, n: usize) -> (Vec<(String, String)>, Vec<String>) {
    h.pools.set_coalescing(1);
    let (mut served, mut failed) = (Vec::new(), Vec::new());
    for _ in 0..n {
        match h.pools.draw(p).await {
            Ok(draw) => served.push((draw.tier.clone().expect("a tier"), draw.member)),
            Err(e) => failed.push(e.to_string()),
        }
        keep_filled(&h.admin, p).await;
    }
    (served, failed)
}

#[tokio::test]
async fn a_tier_whose_every_channel_is_at_its_cap_falls_back_like_an_empty_one() {
    for (name, daily, window) in [("tier-cap-day", true, false), ("tier-cap-window", false, true)] {
        // Arrange: N's only channel may take 5 draws (a day, or a 10-minute window).
        let h = harness(Clock::manual(noon()));
        let p = pool(name);
        let mut s = capped_tiers_snapshot();
        if daily {
            s.caps = BTreeMap::from([("NA".to_owned(), 5)]);
        }
        if window {
            s.window_caps =
                Some(engine::caps::WindowCaps { minutes: 10, caps: BTreeMap::from([("NA".to_owned(), 5)]) });
        }
        publish(&h, &p, &s).await;
        keep_filled(&h.admin, &p).await;

        // Act
        let (served, failed) = draw_tiers_filled(&h, &p, 200).await;

        // Assert: every draw served; NA exactly at its cap, N's other draws served by G;
        // no N ticket popped once NA was capped.
        assert!(failed.is_empty(), "{name}: {} of 200 draws failed, the first: {}", failed.len(), failed[0]);
        let channels = tally(&served.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>());
        assert_eq!(channels.get("NA"), Some(&5), "{name}: {channels:?}");
        assert!(served.iter().all(|(t, m)| (t == "N") == (m == "NA")), "{name}: {served:?}");
        assert_eq!(
            llen(&h.keys().pool_tier_tickets(p.as_str(), "N")) + llen(&h.keys().pool_tier_standby(p.as_str(), "N")),
            195,
            "{name}: N's lane keeps its tickets for when the cap resets"
        );
    }
}

#[tokio::test]
async fn a_tier_whose_list_ran_dry_is_served_from_its_standby_batch_not_mapped_away() {
    // Arrange: tier G's list empty, its standby batch built.
    let h = harness(Clock::manual(noon()));
    let p = pool("tier-standby");
    publish(&h, &p, &tiers_snapshot()).await;
    let g_list = h.keys().pool_tier_tickets(p.as_str(), "G");
    let g_standby = h.keys().pool_tier_standby(p.as_str(), "G");
    let mut conn = raw_connection();
    redis::cmd("RENAME").arg(&g_list).arg(&g_standby).query::<()>(&mut conn).unwrap();
    assert_eq!(llen(&g_list), 0);
    let standby_len = llen(&g_standby);

    // Act: draw until a G ticket comes up.
    let mut served = None;
    for _ in 0..20 {
        let draw = h.pools.draw(&p).await.unwrap();
        if draw.member.starts_with('G') || draw.tier.as_deref() == Some("G") {
            served = Some(draw);
            break;
        }
    }

    // Assert: G was served by G, from the promoted standby batch, and a refill was asked.
    let draw = served.expect("a G ticket among the first 20");
    assert_eq!(draw.tier.as_deref(), Some("G"));
    assert!(draw.member.starts_with('G'), "{draw:?}");
    assert_eq!(llen(&g_standby), 0);
    assert_eq!(llen(&g_list), standby_len - 1);
    assert!(h.admin.refill_flagged(&p).await.unwrap());
}

// ---------------------------------------------------------------------------------------
// A pool Redis lost
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_pool_redis_lost_is_drawn_locally_and_reported_missing_while_a_stranger_stays_unknown() {
    // Arrange: one pool drawn from Redis (the client learns its snapshot), one only
    // remembered from the control plane, then Redis loses every key.
    let h = harness(Clock::manual(noon()));
    let (seen, told, stranger) = (pool("seen"), pool("told"), pool("stranger"));
    publish(&h, &seen, &snapshot("A=3,B=1", 4, 0, Ordering::Smooth)).await;
    keep_filled(&h.admin, &seen).await;
    from_redis(h.pools.draw(&seen).await);
    h.pools.remember(&told, snapshot("C=1", 4, 0, Ordering::Smooth));
    let mut conn = raw_connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg(h.keys().scan_pattern()).query(&mut conn).unwrap();
    redis::cmd("DEL").arg(keys).query::<()>(&mut conn).unwrap();

    // Act
    let a = h.pools.draw(&seen).await.unwrap();
    let b = h.pools.draw(&told).await.unwrap();
    let sticky = h.pools.draw_sticky(&seen, b"user-7").await.unwrap();
    let unknown = h.pools.draw(&stranger).await;
    let missing = tokio::time::timeout(Duration::from_secs(5), h.pools.missing_meta()).await.expect("reported at once");

    // Assert
    assert_eq!((a.source, b.source, sticky.source), (DrawSource::Local, DrawSource::Local, DrawSource::Local));
    assert_eq!(b.member, "C");
    assert!(matches!(unknown, Err(PoolError::UnknownPool(_))), "{unknown:?}");
    let mut missing: Vec<String> = missing.iter().map(ToString::to_string).collect();
    missing.sort();
    assert_eq!(missing, vec!["seen".to_owned(), "told".to_owned()]);
}

#[tokio::test]
async fn a_peak_window_applies_within_a_refill_interval_of_its_start_and_stops_at_its_end() {
    // Arrange: A=3,B=1, and from 12:30 to 13:00 local (Singapore) A=1,B=3; batches of 4.
    let h = harness(Clock::manual(at("2030-03-15T04:29:50Z")));
    let p = pool("peaky");
    let mut s = snapshot("A=3,B=1", 4, 0, Ordering::Smooth);
    let start = engine::peak::parse_local_time("12:30").unwrap();
    let end = engine::peak::parse_local_time("13:00").unwrap();
    s.peak_windows = vec![engine::peak::PeakWindow::new(start, end, 1, Some(weights("A=1,B=3"))).unwrap()];
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    assert!(!h.admin.follow_peak(&p).await.unwrap(), "first seen: nothing to rebuild");
    let before = tally(&draw_n(&h, &p, 4).await);

    // Act: the window opens; the refiller's next sweep follows it. Then it closes.
    h.clock.set(at("2030-03-15T04:30:01Z"));
    let opened = h.admin.follow_peak(&p).await.unwrap();
    let again = h.admin.follow_peak(&p).await.unwrap();
    let inside = tally(&draw_n(&h, &p, 4).await);
    h.clock.set(at("2030-03-15T05:00:01Z"));
    let closed = h.admin.follow_peak(&p).await.unwrap();
    let after = tally(&draw_n(&h, &p, 4).await);

    // Assert: whole batches of the weights in force, no lingering tickets.
    assert_eq!(before, expected(&[("A", 3), ("B", 1)]));
    assert!(opened && !again);
    assert_eq!(inside, expected(&[("A", 1), ("B", 3)]));
    assert!(closed);
    assert_eq!(after, expected(&[("A", 3), ("B", 1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draws_racing_the_first_publish_of_a_tiers_pool_never_find_a_tier_without_its_channels() {
    // Arrange: fresh tiers pools, each drawn in a tight loop by another client while it is
    // published for the first time.
    let h = harness(Clock::manual(noon()));
    let mut errors = Vec::new();
    for i in 0..20 {
        let p = pool(&format!("race-{i}"));
        let drawer = h.client_at(&redis_url(), HashMap::new());
        drawer.set_coalescing(1);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p2, stop2) = (p.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut failures = Vec::new();
            while !stop2.load(AtomicOrdering::Relaxed) {
                match drawer.draw(&p2).await {
                    Ok(_) | Err(PoolError::UnknownPool(_)) => {}
                    Err(e) => failures.push(e.to_string()),
                }
            }
            failures
        });

        // Act
        publish(&h, &p, &tiers_snapshot()).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        stop.store(true, AtomicOrdering::Relaxed);
        errors.extend(task.await.unwrap());
    }

    // Assert: a draw between the tier tickets and the tiers' channel lists would be refused
    // ("no drawable member"); the lists of channels come first, so none is.
    assert!(errors.is_empty(), "{} draws refused, first: {:?}", errors.len(), errors.first());
}

// ---------------------------------------------------------------------------------------
// Ticket leases
// ---------------------------------------------------------------------------------------

fn leasing(h: &Harness, max: usize, hold: Duration) -> Pools {
    let pools = h.client_at(&redis_url(), HashMap::new());
    pools.set_ticket_leases(Some(client::pool::LeaseSettings { max, hold }));
    pools
}

/// `n` draws through `pools`, eight at a time (so the draws share calls and leases are
/// taken ahead).
async fn draw_many_at_once(pools: &Pools, p: &PoolName, n: usize) -> Vec<Draw> {
    let taken = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (pools, p, taken) = (pools.clone(), p.clone(), taken.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                while taken.fetch_add(1, AtomicOrdering::SeqCst) < n {
                    mine.push(pools.draw(&p).await.expect("a draw"));
                }
                mine
            })
        })
        .collect();
    let mut draws = Vec::new();
    for task in tasks {
        draws.extend(task.await.unwrap());
    }
    draws
}

/// Draws one at a time until `pools` holds leased tickets (a lease may be served out just
/// as a run of draws ends); the draws made are added to `draws`.
async fn until_leased(pools: &Pools, p: &PoolName, draws: &mut Vec<Draw>) {
    for _ in 0..100 {
        if pools.tickets_leased() > 0 {
            return;
        }
        draws.push(pools.draw(p).await.expect("a draw"));
    }
    panic!("no ticket leased after 100 more draws");
}

fn without_zeros(counts: BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    counts.into_iter().filter(|(_, n)| *n > 0).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_with_ticket_leases_serve_each_ticket_once_and_return_the_rest_to_the_head() {
    // Arrange: 45:30:25 in batches of 100, list and standby full (200 tickets); two
    // instances leasing up to 32 tickets ahead, held long enough for the test
    let h = harness(Clock::manual(noon()));
    let p = pool("leased");
    let s = snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let (one, two) = (leasing(&h, 32, Duration::from_secs(30)), leasing(&h, 32, Duration::from_secs(30)));

    // Act: 75 draws through each instance at once (and on, one at a time, until each
    // holds a lease); both give their leases back (as at shutdown); a third instance
    // without leases draws what is left in Redis
    let (mut a, mut b) = tokio::join!(draw_many_at_once(&one, &p, 75), draw_many_at_once(&two, &p, 75));
    until_leased(&one, &p, &mut a).await;
    until_leased(&two, &p, &mut b).await;
    let held = one.tickets_leased() + two.tickets_leased();
    let leased = one.leased_draws() + two.leased_draws();
    let returned = one.return_leases().await.unwrap() + two.return_leases().await.unwrap();
    let left = h.admin.length(&p).await.unwrap() + llen(&h.keys().pool_standby(p.as_str()));
    let rest = draw_many_at_once(&h.pools, &p, left as usize).await;

    // Assert: draws were served from leases and tickets were held; every held ticket went
    // back; the 200 draws are exactly two batches, and the day's hits count each draw once
    // (the returned tickets were taken back)
    assert!(leased > 0, "no draw was served from a lease");
    assert!(held > 0 && returned == held, "held {held}, returned {returned}");
    assert_eq!(left, 200 - (a.len() + b.len()) as u64);
    let all: Vec<String> = a.iter().chain(&b).chain(&rest).map(|d| d.member.clone()).collect();
    assert!(a.iter().chain(&b).chain(&rest).all(|d| d.source == DrawSource::Redis));
    assert_eq!(tally(&all), apportioned(&s.weights, 100, 2));
    assert_eq!(without_zeros(hits(&h, &p, "2030-03-15")), apportioned(&s.weights, 100, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_tickets_of_a_version_the_pool_no_longer_has_are_dropped_not_returned() {
    // Arrange: an instance holding leased tickets of version 1
    let h = harness(Clock::manual(noon()));
    let p = pool("reversioned");
    let s = snapshot("A=1,B=1", 100, 10, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let pools = leasing(&h, 32, Duration::from_secs(30));
    let mut served = draw_many_at_once(&pools, &p, 40).await;
    until_leased(&pools, &p, &mut served).await;
    let held = pools.tickets_leased();
    assert!(held > 0, "no ticket leased");

    // Act: version 2 is published; the instance gives its lease back
    publish(&h, &p, &PoolSnapshot { version: 2, ..snapshot("A=1,B=3", 100, 10, Ordering::Smooth) }).await;
    let length = h.admin.length(&p).await.unwrap();
    let returned = pools.return_leases().await.unwrap();

    // Assert: nothing went back into the list; the day's hits count only what was served
    assert_eq!(returned, 0);
    assert_eq!(h.admin.length(&p).await.unwrap(), length);
    let members: Vec<&str> = served.iter().map(|d| d.member.as_str()).collect();
    assert_eq!(without_zeros(hits(&h, &p, "2030-03-15")), tally(&members));
    assert_eq!(pools.tickets_leased(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_past_its_hold_goes_back_and_the_next_draw_takes_a_fresh_one() {
    // Arrange: an instance whose leases are held 50 ms
    let h = harness(Clock::manual(noon()));
    let p = pool("held");
    let s = snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth);
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let pools = leasing(&h, 32, Duration::from_millis(50));
    let mut draws = draw_many_at_once(&pools, &p, 30).await;
    assert!(pools.leased_draws() > 0, "no draw was served from a lease");

    // Act: the hold passes (the lease's timer gives its tickets back); more draws, until
    // every ticket of the two batches is drawn
    let in_redis = || h.admin.length(&p);
    let mut waited = 0;
    while pools.tickets_leased() > 0 {
        waited += 1;
        assert!(waited < 500, "the lease was not given back after its hold");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let standby = llen(&h.keys().pool_standby(p.as_str()));
    assert_eq!(in_redis().await.unwrap() + standby + draws.len() as u64, 200, "every unserved ticket is back");
    draws.extend(draw_many_at_once(&pools, &p, 1).await);
    pools.return_leases().await.unwrap();
    let left = h.admin.length(&p).await.unwrap() + llen(&h.keys().pool_standby(p.as_str()));
    pools.set_ticket_leases(None);
    draws.extend(draw_many_at_once(&pools, &p, left as usize).await);

    // Assert: exactly two batches drawn, every ticket once
    let members: Vec<&str> = draws.iter().map(|d| d.member.as_str()).collect();
    assert_eq!(draws.len(), 200);
    assert_eq!(tally(&members), apportioned(&s.weights, 100, 2));
}

/// A published, filled pool `name`, its list's tickets in order before any draw, and one
/// instance with metrics leasing up to 32 tickets ahead, held 30 s; its leased-tickets
/// gauge for the pool.
async fn leasing_in_order(h: &Harness, name: &str) -> (PoolName, Vec<String>, Pools, prometheus::IntGauge) {
    let p = pool(name);
    publish(h, &p, &snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth)).await;
    keep_filled(&h.admin, &p).await;
    let before = lrange(&h.keys().pool_tickets(p.as_str()));
    let seconds =
        prometheus::HistogramVec::new(prometheus::HistogramOpts::new("script_seconds", "test"), &["script"]).unwrap();
    let metrics = client::PoolMetrics::register(&prometheus::Registry::new(), seconds).unwrap();
    let gauge = metrics.tickets_leased.with_label_values(&[p.as_str()]);
    let pools = Pools::new(handle(&redis_url()), h.keys().clone(), h.clock.clone(), HashMap::new(), Some(metrics));
    pools.set_ticket_leases(Some(client::pool::LeaseSettings { max: 32, hold: Duration::from_secs(30) }));
    (p, before, pools, gauge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn returned_tickets_go_back_to_the_head_of_the_list_in_their_order() {
    // Arrange: one instance leasing ahead; the list's tickets in order before any draw
    let h = harness(Clock::manual(noon()));
    let (p, before, pools, held) = leasing_in_order(&h, "ordered").await;

    // Act: 20 draws, one at a time (a lease is taken ahead), then the lease goes back
    let mut served = Vec::new();
    for _ in 0..20 {
        served.push(pools.draw(&p).await.unwrap().member);
    }
    assert!(pools.tickets_leased() > 0, "no ticket leased");
    assert_eq!(held.get(), pools.tickets_leased() as i64, "the gauge counts the tickets held");
    pools.return_leases().await.unwrap();

    // Assert: the first 20 tickets were served in order, and the list is the rest of the
    // original, in order; the gauge says none are held
    assert_eq!(held.get(), 0);
    assert_eq!(served, before[..20]);
    assert_eq!(lrange(&h.keys().pool_tickets(p.as_str())), before[20..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tickets_held_when_leases_are_turned_off_go_back_with_the_next_draw_and_are_not_served() {
    // Arrange: one instance leasing ahead with a long hold, drawing until it holds a lease
    let h = harness(Clock::manual(noon()));
    let (p, before, pools, held) = leasing_in_order(&h, "switched").await;
    let mut served = Vec::new();
    while pools.tickets_leased() == 0 {
        // (The first draw learns the pool's snapshot; a later one takes the lease.)
        assert!(served.len() < 5, "no ticket leased after {} draws", served.len());
        served.push(pools.draw(&p).await.unwrap().member);
    }
    let leased = pools.leased_draws();

    // Act: leases off (the lease's hold is far from over), then a draw
    pools.set_ticket_leases(None);
    served.push(pools.draw(&p).await.unwrap().member);

    // Assert: the draw was not served from the lease; the lease went back to the head of
    // the list first, so the draw took the next ticket from Redis, and the list is the rest
    assert_eq!(pools.leased_draws(), leased, "a draw served from a lease after leases were turned off");
    assert_eq!((pools.tickets_leased(), held.get()), (0, 0));
    let n = served.len();
    assert_eq!(served, before[..n]);
    assert_eq!(lrange(&h.keys().pool_tickets(p.as_str())), before[n..]);
}

// ---------------------------------------------------------------------------------------
// 10. Short-window caps and the draw log
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ten_minute_cap_stops_the_member_at_exactly_its_cap_in_concurrent_draws_and_frees_it_the_next_window() {
    // Arrange: C would get 20 of every 100 tickets; it may take 6 in each ten minutes.
    // Four instances draw at once, each coalescing its own concurrent draws.
    let h = harness(Clock::manual(at("2030-03-15T04:03:00Z")));
    let p = pool("cn-pay");
    let s = PoolSnapshot {
        window_caps: Some(engine::caps::WindowCaps { minutes: 10, caps: BTreeMap::from([("C".to_owned(), 6)]) }),
        ..snapshot("A=5,B=3,C=2", 1000, 10, Ordering::Smooth)
    };
    publish(&h, &p, &s).await;
    keep_filled(&h.admin, &p).await;
    let instances: Vec<Pools> = (0..4).map(|_| h.client_at(&redis_url(), HashMap::new())).collect();

    // Act: 400 draws in the window of 04:00, then 400 in the window of 04:10
    let mut first = Vec::new();
    for pools in &instances {
        first.extend(draw_many_at_once(pools, &p, 100).await.into_iter().map(|d| d.member));
    }
    let window = |start: &str| h.keys().pool_window_hits(p.as_str(), &at(start).timestamp_millis().to_string());
    let first_hits: HashMap<String, u64> =
        redis::cmd("HGETALL").arg(window("2030-03-15T04:00:00Z")).query(&mut raw_connection()).unwrap();
    let expires: i64 =
        redis::cmd("PEXPIRETIME").arg(window("2030-03-15T04:00:00Z")).query(&mut raw_connection()).unwrap();
    h.clock.set(at("2030-03-15T04:10:30Z"));
    let tasks: Vec<_> = instances
        .iter()
        .map(|pools| {
            let (pools, p) = (pools.clone(), p.clone());
            tokio::spawn(async move { draw_many_at_once(&pools, &p, 100).await })
        })
        .collect();
    let mut second = Vec::new();
    for task in tasks {
        second.extend(task.await.unwrap().into_iter().map(|d| d.member));
    }

    // Assert: exactly 6 C in each window, the others go on; the window's counters expire
    // one window after it ends
    let (t1, t2) = (tally(&first), tally(&second));
    assert_eq!(t1["C"], 6, "{t1:?}");
    assert_eq!(t1["A"] + t1["B"], 394, "{t1:?}");
    assert_eq!(first_hits["C"], 6, "{first_hits:?}");
    assert_eq!(expires, at("2030-03-15T04:20:00Z").timestamp_millis());
    assert_eq!(t2["C"], 6, "the next window frees C: {t2:?}");
    assert_eq!(t2["A"] + t2["B"], 394, "{t2:?}");
}

#[tokio::test]
async fn the_draw_log_holds_every_ticket_handed_out_in_order_and_a_pool_without_it_logs_nothing() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let (logged, quiet) = (pool("logged"), pool("quiet"));
    publish(&h, &logged, &snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth)).await;
    publish(&h, &quiet, &PoolSnapshot { draw_log: false, ..snapshot("A=5,B=3,C=2", 100, 10, Ordering::Smooth) }).await;

    // Act
    let drawn = draw_filled(&h, &logged, 150).await;
    draw_filled(&h, &quiet, 20).await;

    // Assert: the entries' members, in order, are the draws; each entry has the draw time
    let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(h.keys().pool_draw_log(logged.as_str()))
        .arg("-")
        .arg("+")
        .query(&mut raw_connection())
        .unwrap();
    let members: Vec<String> =
        entries.iter().flat_map(|(_, f)| f["m"].split(',').map(str::to_owned).collect::<Vec<_>>()).collect();
    assert_eq!(members, drawn);
    assert!(entries.iter().all(|(_, f)| f["t"] == noon().timestamp_millis().to_string()), "{entries:?}");
    let quiet_len: u64 =
        redis::cmd("XLEN").arg(h.keys().pool_draw_log(quiet.as_str())).query(&mut raw_connection()).unwrap();
    assert_eq!(quiet_len, 0);
}

#[tokio::test]
async fn a_window_grown_longer_keeps_counting_its_draws_until_the_longer_window_ends() {
    // Arrange: A may take 3 in ten minutes; it takes them at 04:01
    let h = harness(Clock::manual(at("2030-03-15T04:01:00Z")));
    let p = pool("grown");
    let capped = |version: u64, minutes: u32| PoolSnapshot {
        version,
        window_caps: Some(engine::caps::WindowCaps { minutes, caps: BTreeMap::from([("A".to_owned(), 3)]) }),
        ..snapshot("A=1", 100, 10, Ordering::Smooth)
    };
    publish(&h, &p, &capped(1, 10)).await;
    keep_filled(&h.admin, &p).await;
    for _ in 0..3 {
        assert_eq!(h.pools.draw(&p).await.unwrap().member, "A");
    }

    // Act: the window becomes an hour at 04:05 (the hash of 04:00 goes on counting); A
    // is still at its cap, and the hash's expiry moves out to one hour after 05:00 (it
    // was 04:20: the hour's counts would have expired in its middle)
    publish(&h, &p, &capped(2, 60)).await;
    h.clock.set(at("2030-03-15T04:05:00Z"));
    let at_cap = h.pools.draw(&p).await;
    let key = h.keys().pool_window_hits(p.as_str(), &at("2030-03-15T04:00:00Z").timestamp_millis().to_string());
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut raw_connection()).unwrap();

    // Assert
    assert!(at_cap.is_err() || at_cap.as_ref().unwrap().source != DrawSource::Redis, "{at_cap:?}");
    assert_eq!(expires, at("2030-03-15T06:00:00Z").timestamp_millis(), "pushed out to one hour after 05:00");
}
