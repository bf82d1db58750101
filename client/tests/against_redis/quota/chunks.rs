//! Chunks: a hot tenant's reserves served from a chunk of its tokens an instance holds in
//! Redis (`lua/chunk_lib.lua`). Every token is accounted for whoever reserves, a chunk never
//! outlives what it was taken under, and a dead instance's chunk comes back with its lease.

use super::*;
use client::quota::ChunkSettings;

const LEASE: Duration = Duration::from_secs(30);

/// A second client (instance) on the same keys and clock as `h`, with chunks for `hot`,
/// which it knows (as a server knows the tenants of its configuration) from the first
/// reserve on.
fn instance(h: &Harness, hot: &[&TenantId]) -> Quotas {
    let quotas = quotas_at(&redis_url(), h.keys().clone(), h.clock.clone());
    if !hot.is_empty() {
        let named = hot.iter().map(|t| (*t).clone()).collect();
        quotas.set_chunks(Some(ChunkSettings::new("test", 0, named, LEASE)));
    }
    for t in hot {
        quotas.remember(t, 1, FallbackPolicy::FailClosed);
    }
    quotas
}

/// The chunks Redis holds for `tenant`: holder -> "bucket|period|left|deadline|version|gen".
fn chunks(h: &Harness, tenant: &str) -> std::collections::HashMap<String, String> {
    redis::cmd("HGETALL").arg(h.keys().quota_chunks(tenant)).query(&mut raw_connection()).unwrap()
}

fn state_field(h: &Harness, tenant: &str, field: &str) -> Option<u64> {
    redis::cmd("HGET").arg(h.keys().quota_state(tenant)).arg(field).query(&mut raw_connection()).unwrap()
}

#[tokio::test]
async fn a_hot_tenants_reserves_come_from_one_chunk_and_every_token_is_accounted_for() {
    // Arrange: acme on a plan of 1,000,000 tokens, hot on instance a
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let a = instance(&h, &[&t]);

    // Act: eleven reserves of 100; the first takes a chunk of 0.1 % of the limit (1,000)
    let mut outcomes = Vec::new();
    for i in 0..11 {
        outcomes.push(reserved(a.reserve(&t, &rid(&format!("r{i}")), tokens(100)).await.unwrap()));
    }
    let held = a.chunk_tokens();
    let usage = h.quotas.usage(&t).await.unwrap();

    // Assert: each is an ordinary reservation of the plan; the chunk's rest counts as
    // reserved, so nothing else can take it
    for r in &outcomes {
        assert_eq!(
            (r.tokens, r.parts.clone(), r.replayed, r.state),
            (100, parts(&[("plan", 100)]), false, ReservationState::Open)
        );
    }
    assert_eq!(held, 900, "the second chunk, after one reserve");
    assert_eq!((bucket(&usage, "plan").reserved, bucket(&usage, "plan").in_chunks), (11 * 100 + 900, 900));
    assert_eq!((usage.available, usage.leases, usage.requests_today), (1_000_000 - 2_000, 11, 11));
    assert_eq!(chunks(&h, "acme").len(), 1);

    // A settle and a release go the usual way.
    a.settle(&t, &rid("r0"), count(60), false).await.unwrap();
    assert_eq!(
        a.release(&t, &rid("r1")).await.unwrap(),
        ReleaseOutcome::Released { reserved: 100, source: Source::Redis }
    );

    // Returning the chunk gives its rest back at once.
    let returned = a.return_chunks().await.unwrap();
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((returned.chunks, returned.tokens), (1, 900));
    assert_eq!(a.chunk_tokens(), 0);
    assert!(chunks(&h, "acme").is_empty());
    assert_eq!((bucket(&usage, "plan").reserved, bucket(&usage, "plan").used), (900, 60));
    assert_eq!(bucket(&usage, "plan").in_chunks, 0);
    assert_eq!(usage.available, 1_000_000 - 900 - 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_with_chunks_and_one_without_never_admit_more_than_the_plan() {
    // Arrange: a plan of 100,000 tokens; instances a and b hold chunks, c reserves exactly
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(100_000)).await;
    let instances = [instance(&h, &[&t]), instance(&h, &[&t]), instance(&h, &[])];
    instances[2].remember(&t, 1, FallbackPolicy::FailClosed);

    // Act: 16 tasks per instance, 70 reserves of 37 tokens each (124,320 asked in all)
    let mut tasks = Vec::new();
    for (n, q) in instances.iter().enumerate() {
        for w in 0..16 {
            let (q, t) = (q.clone(), t.clone());
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for i in 0..70 {
                    let id = rid(&format!("i{n}-w{w}-{i}"));
                    if let ReserveOutcome::Reserved(r) = q.reserve(&t, &id, tokens(37)).await.unwrap() {
                        assert_eq!(r.parts, parts(&[("plan", 37)]));
                        admitted += r.tokens;
                    }
                }
                admitted
            }));
        }
    }
    let admitted: u64 = futures::future::join_all(tasks).await.into_iter().map(|r| r.unwrap()).sum();
    let held: u64 = chunks(&h, "acme").values().map(|c| c.split('|').nth(2).unwrap().parse::<u64>().unwrap()).sum();
    let during = h.quotas.usage(&t).await.unwrap();
    for q in &instances {
        q.return_chunks().await.unwrap();
    }
    let usage = h.quotas.usage(&t).await.unwrap();

    // Assert: never more than the plan; what was admitted plus what the chunks held is what
    // Redis counted as reserved; once the chunks are back, only the admissions are
    assert!(admitted <= 100_000, "admitted {admitted}");
    assert_eq!(bucket(&during, "plan").reserved, admitted + held);
    assert_eq!(bucket(&usage, "plan").reserved, admitted);
    assert_eq!(usage.available, 100_000 - admitted);
    // Refusals came only once less than a request was left outside the two holders' chunks
    // (each at most 1 % of the limit).
    assert!(usage.available < 37 + 2 * 1_000, "{} available", usage.available);
    assert_eq!(usage.leases as u64 * 37, admitted);
    assert!(chunks(&h, "acme").is_empty());
}

#[tokio::test]
async fn a_dead_instances_chunk_comes_back_when_its_lease_ends() {
    // Arrange: instance a takes a chunk of 1,000 and dies; b (no chunks) takes the rest
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let a = instance(&h, &[&t]);
    reserved(a.reserve(&t, &rid("a1"), tokens(100)).await.unwrap());
    drop(a);
    let b = instance(&h, &[]);
    reserved(b.reserve(&t, &rid("b1"), tokens(999_000)).await.unwrap());

    // Act: one second before the lease ends, and one second after it
    h.clock.set(noon() + chrono::Duration::seconds(29));
    let before = b.reserve(&t, &rid("b2"), tokens(500)).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(31));
    let after = b.reserve(&t, &rid("b3"), tokens(500)).await.unwrap();

    // Assert: refused while the chunk held the rest; admitted once its lease had ended (the
    // refusal returned it)
    assert_eq!(refused(before), Refusal { dimension: Dimension::Tokens, available: 0, limit: 1_000_000 });
    assert_eq!(reserved(after).parts, parts(&[("plan", 500)]));
    assert!(chunks(&h, "acme").is_empty());
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").reserved, usage.available), (100 + 999_000 + 500, 400));
}

#[tokio::test]
async fn the_sweeper_returns_a_chunk_whose_lease_ended_and_no_other() {
    // Arrange: instances a and b each hold a chunk; b's is taken 20 seconds later
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let (a, b) = (instance(&h, &[&t]), instance(&h, &[&t]));
    reserved(a.reserve(&t, &rid("a1"), tokens(100)).await.unwrap());
    h.clock.set(noon() + chrono::Duration::seconds(20));
    reserved(b.reserve(&t, &rid("b1"), tokens(300)).await.unwrap());

    // Act: a sweep after a's lease ended, before b's
    h.clock.set(noon() + chrono::Duration::seconds(31));
    let swept = h.quotas.sweep(&t, 100).await.unwrap();

    // Assert: a's rest (900) came back; b's chunk (1,000 less 300) is still held
    assert_eq!((swept.chunks, swept.chunk_tokens, swept.released), (1, 900, 0));
    let left: Vec<String> = chunks(&h, "acme").into_values().collect();
    assert_eq!(left.len(), 1);
    assert!(left[0].starts_with("plan|2030-03|700|"), "{left:?}");
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(bucket(&usage, "plan").reserved, 100 + 300 + 700);
}

#[tokio::test]
async fn a_retry_of_a_request_served_from_a_chunk_returns_the_first_result_on_another_instance() {
    // Arrange: a serves r1 from its chunk
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let (a, b) = (instance(&h, &[&t]), instance(&h, &[]));
    let first = reserved(a.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());

    // Act: the retry goes to b, the settle to b, a repeated settle to a, a retry to a
    let retried = reserved(b.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());
    let settled = b.settle(&t, &rid("r1"), count(80), false).await.unwrap();
    let again = a.settle(&t, &rid("r1"), count(80), false).await.unwrap();
    let late_retry = reserved(a.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());

    // Assert
    assert_eq!((retried.replayed, retried.deadline_ms, retried.parts.clone()), (true, first.deadline_ms, first.parts));
    assert!(matches!(settled, SettleOutcome::Settled { reserved: 100, actual: 80, .. }), "{settled:?}");
    assert_eq!(again, SettleOutcome::AlreadySettled { reserved: 100, actual: 80, charged: parts(&[("plan", 80)]) });
    assert_eq!((late_retry.replayed, late_retry.state), (true, ReservationState::Settled));
    assert_eq!(a.chunk_tokens(), 900, "retries took nothing from the chunk");
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").reserved, bucket(&usage, "plan").used), (900, 80));
}

#[tokio::test]
async fn a_chunk_serves_no_reserve_under_a_newer_snapshot_or_in_a_new_month_and_comes_back() {
    // Arrange: a holds a chunk of March's plan (1,000 less r1's 100)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let a = instance(&h, &[&t]);
    reserved(a.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());

    // Act: version 2 of the snapshot, then a reserve; then April, then a reserve
    publish(&h, &t, &TenantQuota { version: 2, ..plan(1_000_000) }).await;
    reserved(a.reserve(&t, &rid("r2"), tokens(100)).await.unwrap());
    let under_v2 = chunks(&h, "acme").into_values().next().unwrap();
    let march_reserved = state_field(&h, "acme", "r:plan:2030-03");
    h.clock.set(at("2030-04-01T00:00:01Z"));
    let r3 = reserved(a.reserve(&t, &rid("r3"), tokens(100)).await.unwrap());

    // Assert: the old chunk came back before a new one was taken under v2 (March then held
    // r1, r2 and the new chunk's 900); in April, March's chunk came back and April's plan
    // gave a new one
    assert!(under_v2.starts_with("plan|2030-03|900|") && under_v2.contains("|2|"), "{under_v2}");
    assert_eq!(march_reserved, Some(100 + 100 + 900));
    assert_eq!(state_field(&h, "acme", "r:plan:2030-03"), Some(200));
    assert_eq!(r3.parts, parts(&[("plan", 100)]));
    let april = chunks(&h, "acme").into_values().next().unwrap();
    assert!(april.starts_with("plan|2030-04|900|"), "{april}");
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").reserved, 100 + 900);
}

#[tokio::test]
async fn a_chunk_of_a_grant_ends_with_the_grant_and_the_next_comes_from_the_plan() {
    // Arrange: a bonus grant of 5,000 that expires ten seconds after noon, before the lease
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let quota = TenantQuota {
        grants: vec![grant("g1", bonus(1), 5_000, Some(noon() + chrono::Duration::seconds(10)))],
        ..plan(1_000_000)
    };
    publish(&h, &t, &quota).await;
    let a = instance(&h, &[&t]);

    // Act: a reserve at noon (from the grant's chunk) and one after the grant expired
    let first = reserved(a.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());
    let from_grant = chunks(&h, "acme").into_values().next().unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(11));
    let second = reserved(a.reserve(&t, &rid("r2"), tokens(100)).await.unwrap());

    // Assert: the grant paid first, its chunk (0.1 % of 1,005,000 is 1,005) ended with it;
    // the grant keeps only r1 reserved
    assert_eq!(first.parts, parts(&[("g1", 100)]));
    let deadline = (noon() + chrono::Duration::seconds(10)).timestamp_millis();
    assert!(from_grant.starts_with("g1|2030-03|905|") && from_grant.contains(&format!("|{deadline}|")), "{from_grant}");
    assert_eq!(second.parts, parts(&[("plan", 100)]));
    assert_eq!(state_field(&h, "acme", "r:g1"), Some(100));
    assert_eq!(state_field(&h, "acme", "r:plan:2030-03"), Some(100 + 900));
}

#[tokio::test]
async fn a_tenant_no_client_knows_and_a_cold_tenant_take_no_chunk() {
    // Arrange: chunks for tenants sending 1,000 reserves a second, and for no named one
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000)).await;
    let q = instance(&h, &[]);
    q.set_chunks(Some(ChunkSettings::new("test", 1_000, HashSet::new(), LEASE)));

    // Act: a few reserves, and one for a name nobody published
    for i in 0..5 {
        reserved(q.reserve(&t, &rid(&format!("r{i}")), tokens(100)).await.unwrap());
    }
    let unknown = q.reserve(&tenant("nobody"), &rid("x"), tokens(1)).await;

    // Assert
    assert!(matches!(unknown, Err(QuotaError::UnknownTenant(_))), "{unknown:?}");
    assert_eq!(q.chunk_tenants(), 1, "only acme, which the client knows, is measured");
    assert!(chunks(&h, "acme").is_empty());
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").reserved, 500);
}

#[tokio::test]
async fn a_plan_chunk_serves_nothing_while_the_plan_is_overdrawn() {
    // Arrange: a plan of 10,000; 9,800 reserved exactly; a holds a chunk of 10 (after r1's 5)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(10_000)).await;
    let a = instance(&h, &[&t]);
    reserved(h.quotas.reserve(&t, &rid("r0"), tokens(9_800)).await.unwrap());
    reserved(a.reserve(&t, &rid("r1"), tokens(5)).await.unwrap());
    assert_eq!(a.chunk_tokens(), 5);

    // Act: r0 uses 199 more than it reserved (the plan goes 9 below zero); then a reserve of
    // 5 on a, which its chunk could hold
    h.quotas.settle(&t, &rid("r0"), count(9_999), false).await.unwrap();
    let outcome = a.reserve(&t, &rid("r2"), tokens(5)).await.unwrap();

    // Assert: refused as the exact path refuses; the chunk went back, r1's 5 stay reserved
    assert_eq!(refused(outcome).dimension, Dimension::Tokens);
    assert!(chunks(&h, "acme").is_empty());
    assert_eq!(a.chunk_tokens(), 0);
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").reserved, bucket(&usage, "plan").used), (5, 9_999));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_killed_in_hot_traffic_loses_nothing_and_oversells_nothing() {
    // Arrange: a plan of 200,000; instances a and b both serve acme from chunks
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(200_000)).await;
    let (a, b) = (instance(&h, &[&t]), instance(&h, &[&t]));
    let worker = |q: Quotas, name: String| {
        let t = t.clone();
        tokio::spawn(async move {
            let mut refusals = 0;
            for i in 0.. {
                let id = rid(&format!("{name}-{i}"));
                match q.reserve(&t, &id, tokens(37)).await.unwrap() {
                    ReserveOutcome::Reserved(_) => {
                        q.settle(&t, &id, count(i % 38), false).await.unwrap();
                    }
                    ReserveOutcome::Refused(_) if refusals == 3 => break,
                    ReserveOutcome::Refused(_) => refusals += 1,
                }
            }
        })
    };
    let doomed: Vec<_> = (0..8).map(|w| worker(a.clone(), format!("a{w}"))).collect();
    let survivors: Vec<_> = (0..8).map(|w| worker(b.clone(), format!("b{w}"))).collect();

    // Act: a dies mid-traffic (its calls in flight ran in Redis or did not; nothing it held
    // is given back); b runs until refused; a minute later the sweeper runs
    let holder = a.chunk_holder().unwrap();
    let started = std::time::Instant::now();
    while !chunks(&h, "acme").contains_key(&holder) {
        assert!(started.elapsed() < Duration::from_secs(10), "a took no chunk");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for task in &doomed {
        task.abort();
    }
    drop(a);
    for task in survivors {
        task.await.unwrap();
    }
    b.return_chunks().await.unwrap();
    let held_by_the_dead =
        chunks(&h, "acme").get(&holder).map(|c| c.split('|').nth(2).unwrap().parse::<u64>().unwrap());
    h.clock.set(noon() + chrono::Duration::seconds(61));
    let swept = h.quotas.sweep(&t, 10_000).await.unwrap();

    // Assert: the dead instance's chunk came back with its lease; every admission has
    // exactly one usage record (settled, or expired: a's requests whose settle never came);
    // what was charged is what the records say, and within the plan
    assert!(held_by_the_dead.is_some_and(|left| left > 0), "a died holding a chunk");
    assert_eq!(swept.chunks, 1);
    assert!(chunks(&h, "acme").is_empty());
    let usage = h.quotas.usage(&t).await.unwrap();
    let plan = bucket(&usage, "plan");
    assert_eq!((plan.reserved, usage.leases), (0, 0));
    let records: Vec<(String, std::collections::HashMap<String, String>)> =
        redis::cmd("XRANGE").arg(h.keys().quota_usage("acme")).arg("-").arg("+").query(&mut raw_connection()).unwrap();
    let ids: HashSet<&String> = records.iter().map(|(_, r)| &r["rid"]).collect();
    assert_eq!(ids.len(), records.len(), "one record per request");
    assert_eq!(records.len() as u64, usage.requests_today, "every admission finished once");
    let charged: u64 =
        records.iter().filter_map(|(_, r)| r["charged"].strip_prefix("plan:")).map(|n| n.parse::<u64>().unwrap()).sum();
    assert_eq!(plan.used, charged);
    assert!(plan.used <= 200_000, "used {}", plan.used);
    // b ran until less than a request was left outside a's chunk (at most 1 % of the plan)
    // and a's open reservations (8 at most).
    assert!(usage.available < 37 + 2_000 + 8 * 37, "{} available", usage.available);
}
