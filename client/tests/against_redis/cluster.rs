//! The client on a Redis Cluster of the test's own (three primaries on loopback ports of
//! its own): a script cannot span two slots, and a pool's slot moved to another node while
//! draws run costs no draw and no ticket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pool::{apportioned, keep_filled, noon, pool, snapshot, tally};
use crate::support::{KeyGuard, OwnCluster};
use client::pool::{Draw, DrawSource, PoolName};
use client::{Clock, PoolAdmin, Pools, RedisHandle, RedisTarget, RedisTimeouts};
use engine::Ordering;

fn handle_on(cluster: &OwnCluster) -> RedisHandle {
    let timeouts = RedisTimeouts::default();
    RedisHandle::on(RedisTarget::cluster(&cluster.nodes(), timeouts).expect("valid nodes"), timeouts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_whose_keys_lie_in_two_slots_is_refused_with_crossslot() {
    // Arrange: the keys of two tenants (two hash tags, two slots) in one script call
    let cluster = OwnCluster::start();
    let guard = KeyGuard::new("cs");
    let (a, b) = (guard.keys.quota_state("acme"), guard.keys.quota_state("globex"));
    let mut conn = handle_on(&cluster).connection().await.expect("the cluster");
    let mut probe = cluster.node(cluster.ports[0]);
    let slot = |key: &str, c: &mut redis::Connection| -> u16 {
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(c).unwrap()
    };
    assert_ne!(slot(&a, &mut probe), slot(&b, &mut probe), "the two tenants' keys must lie in two slots");

    // Act
    let refused =
        redis::Script::new("return redis.call('HSET', KEYS[1], 'x', 1) + redis.call('HSET', KEYS[2], 'x', 1)")
            .key(&a)
            .key(&b)
            .invoke_async::<i64>(&mut conn)
            .await;
    let same_tenant =
        redis::Script::new("return redis.call('HSET', KEYS[1], 'x', 1) + redis.call('HSET', KEYS[2], 'x', 1)")
            .key(&a)
            .key(guard.keys.quota_ledger("acme"))
            .invoke_async::<i64>(&mut conn)
            .await;

    // Assert: CROSSSLOT, and nothing written; one tenant's keys run as one script
    let e = refused.expect_err("a script over two slots must be refused");
    assert_eq!(e.kind(), redis::ErrorKind::CrossSlot, "{e}");
    let written: bool = redis::cmd("EXISTS").arg(&b).query_async(&mut conn).await.unwrap();
    assert!(!written, "nothing of a refused script is written");
    assert_eq!(same_tenant.expect("one tenant's keys share a slot"), 2);
}

/// The node id and port of every primary, from one node's `CLUSTER NODES`.
fn primaries(conn: &mut redis::Connection) -> Vec<(String, u16)> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(conn).unwrap();
    text.lines()
        .filter(|l| l.contains("master"))
        .map(|l| {
            let mut fields = l.split_whitespace();
            let id = fields.next().unwrap().to_owned();
            let address = fields.next().unwrap();
            let port = address.split(['@']).next().unwrap().rsplit(':').next().unwrap().parse().unwrap();
            (id, port)
        })
        .collect()
}

/// Moves `slot` from the node on `from` to the node on `to` as `redis-cli --cluster
/// reshard` does: IMPORTING / MIGRATING, the keys one at a time (`before_each_key` first,
/// and a pause after each, so draws meet the slot half moved: ASK and TRYAGAIN), then the
/// new owner on every node.
fn move_slot(
    cluster: &OwnCluster,
    slot: u16,
    from: (String, u16),
    to: (String, u16),
    before_each_key: impl Fn(),
) -> usize {
    let (mut source, mut target) = (cluster.node(from.1), cluster.node(to.1));
    let () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("IMPORTING").arg(&from.0).query(&mut target).unwrap();
    let () = redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("MIGRATING").arg(&to.0).query(&mut source).unwrap();
    let mut moved = 0;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(1).query(&mut source).unwrap();
        let Some(key) = keys.first() else { break };
        before_each_key();
        let () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to.1)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(key)
            .query(&mut source)
            .unwrap();
        moved += 1;
        std::thread::sleep(Duration::from_millis(15));
    }
    for port in [to.1, from.1].into_iter().chain(cluster.ports.iter().copied().filter(|p| *p != to.1 && *p != from.1)) {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to.0)
            .query(&mut cluster.node(port))
            .unwrap();
    }
    moved
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pools_slot_moved_to_another_node_while_draws_run_loses_no_draw_and_no_ticket() {
    // Arrange: 45:30:25 in batches of 100 on a cluster of its own; eight drawers
    let cluster = Arc::new(OwnCluster::start());
    let guard = KeyGuard::new("rs");
    let clock = Clock::manual(noon());
    let admin = PoolAdmin::new(handle_on(&cluster), guard.keys.clone(), clock.clone());
    let p: PoolName = pool("moving");
    let s = snapshot("A=45,B=30,C=25", 100, 10, Ordering::Smooth);
    assert!(admin.publish(&p, &s).await.expect("publish"));
    let drawers: Vec<Pools> = (0..8)
        .map(|_| Pools::new(handle_on(&cluster), guard.keys.clone(), clock.clone(), HashMap::new(), None))
        .collect();
    let meta = guard.keys.pool_meta(p.as_str());
    let mut probe = cluster.node(cluster.ports[0]);
    let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&meta).query(&mut probe).unwrap();
    let nodes = primaries(&mut probe);
    let owner_port: u16 = {
        let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut probe).unwrap();
        slots
            .iter()
            .find_map(|r| {
                let (start, end): (u16, u16) =
                    (redis::from_redis_value(&r[0]).unwrap(), redis::from_redis_value(&r[1]).unwrap());
                let redis::Value::Array(node) = &r[2] else { return None };
                (start <= slot && slot <= end).then(|| redis::from_redis_value(&node[1]).unwrap())
            })
            .expect("an owner of the slot")
    };
    let from = nodes.iter().find(|(_, port)| *port == owner_port).unwrap().clone();
    let to = nodes.iter().find(|(_, port)| *port != owner_port).unwrap().clone();

    // Act: rounds of 200 draws (each round first refilled: list + standby batch); the slot
    // moves, key by key, while the rounds go on. Each key is migrated only while a draw is
    // in flight (up to 2 s of waiting, as between two rounds), so the move cannot slip
    // through a gap between draws on a slow machine.
    const BEFORE: usize = 0;
    const MOVING: usize = 1;
    const DONE: usize = 2;
    let phase = Arc::new(AtomicUsize::new(BEFORE));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let overlapping_draws = Arc::new(AtomicUsize::new(0));
    let mover = {
        let (phase, in_flight, cluster, from, to) =
            (phase.clone(), in_flight.clone(), cluster.clone(), from.clone(), to.clone());
        tokio::task::spawn_blocking(move || {
            let a_draw_in_flight = || {
                let until = Instant::now() + Duration::from_secs(2);
                while in_flight.load(AtomicOrdering::SeqCst) == 0 && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
            };
            a_draw_in_flight();
            phase.store(MOVING, AtomicOrdering::SeqCst);
            let moved = move_slot(&cluster, slot, from, to, a_draw_in_flight);
            phase.store(DONE, AtomicOrdering::SeqCst);
            moved
        })
    };
    let mut draws: Vec<Draw> = Vec::new();
    let (mut rounds, per_round) = (0, 200);
    while rounds < 6 || !mover.is_finished() {
        keep_filled(&admin, &p).await;
        let taken = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = drawers
            .iter()
            .map(|pools| {
                let (pools, p, taken, phase, in_flight, overlapping) = (
                    pools.clone(),
                    p.clone(),
                    taken.clone(),
                    phase.clone(),
                    in_flight.clone(),
                    overlapping_draws.clone(),
                );
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    while taken.fetch_add(1, AtomicOrdering::SeqCst) < per_round {
                        // A draw overlaps the move when it began before the move ended and
                        // ended after it began (a script meeting the slot half moved waits
                        // out TRYAGAIN).
                        in_flight.fetch_add(1, AtomicOrdering::SeqCst);
                        let began = phase.load(AtomicOrdering::SeqCst);
                        mine.push(pools.draw(&p).await.expect("a draw during the slot move"));
                        let ended = phase.load(AtomicOrdering::SeqCst);
                        in_flight.fetch_sub(1, AtomicOrdering::SeqCst);
                        if began != DONE && ended != BEFORE {
                            overlapping.fetch_add(1, AtomicOrdering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    mine
                })
            })
            .collect();
        for task in tasks {
            draws.extend(task.await.unwrap());
        }
        rounds += 1;
        assert!(rounds < 200, "the slot move did not finish");
    }
    let moved_keys = mover.await.unwrap();

    // Assert: the pool's keys moved to the other node while draws ran; every draw came from
    // Redis, and the whole batches hold exactly the apportioned counts
    assert!(moved_keys >= 3, "only {moved_keys} keys moved");
    let overlapping = overlapping_draws.load(AtomicOrdering::SeqCst);
    assert!(overlapping > 0, "no draw ran while the slot moved");
    eprintln!("{moved_keys} keys moved; {overlapping} of {} draws overlapped the move", draws.len());
    let owner_now: u16 = {
        let mut target = cluster.node(to.1);
        let exists: bool = redis::cmd("EXISTS").arg(&meta).query(&mut target).unwrap();
        assert!(exists, "the pool's meta is on the new node");
        to.1
    };
    assert_ne!(owner_now, owner_port);
    assert!(draws.iter().all(|d| d.source == DrawSource::Redis), "a draw left redis");
    let members: Vec<&str> = draws.iter().map(|d| d.member.as_str()).collect();
    let batches = draws.len() / 100;
    assert_eq!(draws.len(), rounds * per_round);
    assert_eq!(tally(&members), apportioned(&s.weights, 100, batches));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_libraries_of_every_primary_are_listed_and_pruned() {
    // Arrange: this build's library on every primary (loaded at connect), and two older
    // builds' each on one primary only (as after a node restarted empty and an old instance
    // loaded its own again there)
    let cluster = OwnCluster::start();
    let mut conn = handle_on(&cluster).connection().await.expect("the cluster");
    client::scripts::quota().library.load(&mut conn).await.expect("loaded on every primary");
    let old =
        [("tessera_quota_00000000000000a1", cluster.ports[1]), ("tessera_quota_00000000000000a2", cluster.ports[2])];
    for (name, port) in old {
        let code = format!("#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)");
        let _: String = redis::cmd("FUNCTION").arg("LOAD").arg(code).query(&mut cluster.node(port)).unwrap();
    }
    let current = client::scripts::quota().library.name().to_owned();

    // Act
    let listed = client::scripts::quota_libraries(&mut conn).await.unwrap();
    let removed = client::scripts::prune_quota_libraries(&mut conn).await.unwrap();
    let after = client::scripts::quota_libraries(&mut conn).await.unwrap();

    // Assert: both old ones listed and removed, wherever they were; this build's stays on
    // every primary
    let mut expected = vec![(old[0].0.to_owned(), false), (old[1].0.to_owned(), false), (current.clone(), true)];
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(removed, vec![old[0].0.to_owned(), old[1].0.to_owned()]);
    assert_eq!(after, vec![(current.clone(), true)]);
    for port in &cluster.ports[..3] {
        let names: Vec<redis::Value> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(&current)
            .query(&mut cluster.node(*port))
            .unwrap();
        assert_eq!(names.len(), 1, "this build's library on the primary at {port}");
    }
}
