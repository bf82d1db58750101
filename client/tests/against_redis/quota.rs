//! Tenant quotas against a real Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`): the
//! scripts in `lua/` as `Quotas` calls them, under concurrency, retries, the sweeper, a
//! month turning, a script cache flush and Redis going away.
//!
//! Every test writes under its own random key prefix and removes its keys afterwards
//! (`SCAN MATCH <prefix>:*` + `UNLINK`, also when the test panics); tests run in parallel.
//! Hand-set clocks sit in the future: a period's keys expire at the period's end plus its
//! retention, by the script's clock, so a date in the past would expire them at once.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{at, handle_for, raw_connection, redis_address, redis_url, KeyGuard};
use chrono::{DateTime, Utc};
use client::quota::{
    Dimension, FallbackPolicy, Grant, GrantId, GrantKind, Part, QuotaError, QuotaUsage, Refusal, ReleaseOutcome,
    RequestId, Reservation, ReservationState, ReserveOutcome, SettleOutcome, Source, SweepOutcome, TenantId,
    TenantQuota, TokenCount, Tokens,
};
use client::{Clock, Keys, Period, Quotas};
use engine::quota::{Bucket, BucketKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use testproxy::{through, Proxy};

mod chunks;
mod full;
mod markers;
mod partial;
mod usage;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// One test's quota client, clock and keys.
struct Harness {
    quotas: Quotas,
    clock: Clock,
    guard: KeyGuard,
}

impl Harness {
    fn keys(&self) -> &Keys {
        &self.guard.keys
    }
}

fn harness(clock: Clock) -> Harness {
    harness_at(&redis_url(), clock)
}

fn harness_at(url: &str, clock: Clock) -> Harness {
    let guard = KeyGuard::new("qt");
    let quotas = quotas_at(url, guard.keys.clone(), clock.clone());
    Harness { quotas, clock, guard }
}

fn quotas_at(url: &str, keys: Keys, clock: Clock) -> Quotas {
    let handle = crate::support::handle_for(url);
    Quotas::with_clock(handle, keys, clock, None)
}

/// Noon in the middle of a month, years ahead of any real clock (see the crate docs).
fn noon() -> DateTime<Utc> {
    at("2030-03-15T12:00:00Z")
}

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).unwrap()
}

fn rid(name: &str) -> RequestId {
    RequestId::parse(name).unwrap()
}

fn tokens(n: u64) -> Tokens {
    Tokens::parse("tokens", n as i128).unwrap()
}

fn count(n: u64) -> TokenCount {
    TokenCount::parse("actual_tokens", n as i128).unwrap()
}

/// A plan of `monthly` tokens with limits high enough never to be the ones refusing.
fn plan(monthly: u64) -> TenantQuota {
    TenantQuota {
        version: 1,
        monthly_tokens: count(monthly),
        daily_requests: 1_000_000,
        concurrency: 10_000,
        grants: Vec::new(),
        reservation_ttl: Duration::from_secs(60),
        retention_days: 30,
        idempotency_window: client::quota::DEFAULT_IDEMPOTENCY_WINDOW,
        fallback: FallbackPolicy::FailClosed,
    }
}

fn grant(id: &str, kind: GrantKind, amount: u64, expires_at: Option<DateTime<Utc>>) -> Grant {
    Grant { id: GrantId::parse(id).unwrap(), kind, amount: tokens(amount), starts_at: None, expires_at }
}

fn bonus(priority: u32) -> GrantKind {
    GrantKind::Bonus { priority }
}

fn parts(list: &[(&str, u64)]) -> Vec<Part> {
    list.iter().map(|(bucket, tokens)| Part { bucket: (*bucket).to_owned(), tokens: *tokens }).collect()
}

#[track_caller]
fn reserved(outcome: ReserveOutcome) -> Reservation {
    match outcome {
        ReserveOutcome::Reserved(r) => r,
        ReserveOutcome::Refused(r) => panic!("expected an admission, got a refusal: {r:?}"),
    }
}

#[track_caller]
fn refused(outcome: ReserveOutcome) -> Refusal {
    match outcome {
        ReserveOutcome::Refused(r) => r,
        ReserveOutcome::Reserved(r) => panic!("expected a refusal, got an admission: {r:?}"),
    }
}

#[track_caller]
fn bucket<'u>(usage: &'u QuotaUsage, id: &str) -> &'u client::quota::BucketUsage {
    usage.buckets.iter().find(|b| b.id == id).unwrap_or_else(|| panic!("no bucket {id:?} in {usage:?}"))
}

/// The window of `tenant`'s done markers that started at the multiple of `window_ms`
/// holding `at`: its generation, start, buckets and newest layout; `None` when neither of
/// the tenant's two windows did.
fn marker_window(h: &Harness, tenant: &str, at: DateTime<Utc>, window_ms: i64) -> Option<(String, i64, u64, u32)> {
    let start = at.timestamp_millis().div_euclid(window_ms) * window_ms;
    let mut conn = raw_connection();
    let gen: String = redis::cmd("HGET").arg(h.keys().quota_state(tenant)).arg("gen").query(&mut conn).unwrap();
    let layouts: Vec<Option<i64>> = redis::cmd("HMGET")
        .arg(h.keys().quota_state(tenant))
        .arg(&Keys::QUOTA_MARKER_LAYOUTS[..])
        .query(&mut conn)
        .unwrap();
    for (start_field, buckets_field) in Keys::QUOTA_MARKER_WINDOWS {
        let (found, buckets): (Option<i64>, Option<u64>) = redis::cmd("HMGET")
            .arg(h.keys().quota_state(tenant))
            .arg(start_field)
            .arg(buckets_field)
            .query(&mut conn)
            .unwrap();
        if found == Some(start) {
            return Some((gen, start, buckets?, client::keys::marker_layout(start, &layouts)));
        }
    }
    None
}

/// The bucket hashes of that window, in every layout it grew to.
fn window_buckets(h: &Harness, tenant: &str, at: DateTime<Utc>, window_ms: i64) -> Option<Vec<String>> {
    let (gen, start, buckets, layout) = marker_window(h, tenant, at, window_ms)?;
    Some(h.keys().quota_done_window(tenant, &gen, start, buckets, layout))
}

/// The hash holding the done marker `tenant` wrote for `rid` in the window of `at`
/// (`window_ms` long), as the scripts name it; `None` when that window is not kept.
fn marker_key(h: &Harness, tenant: &str, rid: &str, at: DateTime<Utc>, window_ms: i64) -> Option<String> {
    let (gen, start, buckets, layout) = marker_window(h, tenant, at, window_ms)?;
    let candidates = h.keys().quota_done_of(tenant, &gen, start, buckets, layout, rid);
    let mut conn = raw_connection();
    // Newest layout first, as the scripts read them.
    candidates.into_iter().rev().find(|key| redis::cmd("HEXISTS").arg(key).arg(rid).query::<bool>(&mut conn).unwrap())
}

async fn publish(h: &Harness, t: &TenantId, quota: &TenantQuota) {
    let (written, version) = h.quotas.publish(t, quota).await.expect("publish");
    assert!(written, "snapshot v{} not written (Redis holds v{version})", quota.version);
}

// ---------------------------------------------------------------------------------------
// 1. Concurrency
// ---------------------------------------------------------------------------------------

async fn reserve_concurrently(h: &Harness, t: &TenantId, n: usize, each: u64) -> Vec<ReserveOutcome> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (quotas, t) = (h.quotas.clone(), t.clone());
            tokio::spawn(async move { quotas.reserve(&t, &rid(&format!("req-{i}")), tokens(each)).await })
        })
        .collect();
    futures::future::join_all(tasks).await.into_iter().map(|joined| joined.expect("task").expect("reserve")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_reserves_admit_exactly_what_the_plan_holds() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(250)).await;

    // Act
    let outcomes = reserve_concurrently(&h, &t, 64, 10).await;

    // Assert
    let (admitted, refusals): (Vec<_>, Vec<_>) =
        outcomes.into_iter().partition(|o| matches!(o, ReserveOutcome::Reserved(_)));
    assert_eq!(admitted.len(), 25);
    assert_eq!(refusals.len(), 39);
    for o in admitted {
        let r = reserved(o);
        assert_eq!((r.tokens, r.parts, r.replayed), (10, parts(&[("plan", 10)]), false));
    }
    for o in refusals {
        assert_eq!(refused(o), Refusal { dimension: Dimension::Tokens, available: 0, limit: 250 });
    }
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(bucket(&usage, "plan").reserved, 250);
    assert_eq!(bucket(&usage, "plan").used, 0);
    assert_eq!((usage.available, usage.leases, usage.requests_today), (0, 25, 25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_reserves_open_exactly_as_many_leases_as_the_concurrency_limit() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &TenantQuota { concurrency: 5, ..plan(1_000_000) }).await;

    // Act
    let outcomes = reserve_concurrently(&h, &t, 64, 10).await;

    // Assert
    let admitted = outcomes.iter().filter(|o| matches!(o, ReserveOutcome::Reserved(_))).count();
    let refusals: Vec<Refusal> =
        outcomes.into_iter().filter(|o| matches!(o, ReserveOutcome::Refused(_))).map(refused).collect();
    assert_eq!(admitted, 5);
    assert_eq!(refusals.len(), 59);
    assert!(refusals.iter().all(|r| *r == Refusal { dimension: Dimension::Concurrency, available: 0, limit: 5 }));
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((usage.leases, usage.concurrency, bucket(&usage, "plan").reserved), (5, 5, 50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pairs_through_one_client_share_script_calls_and_the_ledger_balances() {
    // Arrange: a client with metrics (to count its script calls)
    let guard = KeyGuard::new("qt");
    let registry = prometheus::Registry::new();
    let metrics = client::QuotaMetrics::register(&registry).unwrap();
    let seconds = metrics.script_seconds.clone();
    let handle = crate::support::handle_for(&redis_url());
    let quotas = Quotas::with_clock(handle, guard.keys.clone(), Clock::manual(noon()), Some(metrics));
    let t = tenant("acme");
    quotas.publish(&t, &plan(1_000_000)).await.unwrap();

    // Act: 64 tasks, each reserving 100 and settling 60, ten times; and eight tasks racing
    // to reserve one and the same request id
    let tasks: Vec<_> = (0..64)
        .map(|w| {
            let (quotas, t) = (quotas.clone(), t.clone());
            tokio::spawn(async move {
                for i in 0..10 {
                    let id = rid(&format!("w{w}-{i}"));
                    let r = reserved(quotas.reserve(&t, &id, tokens(100)).await.unwrap());
                    assert!(!r.replayed);
                    match quotas.settle(&t, &id, count(60), false).await.unwrap() {
                        SettleOutcome::Settled { reserved, actual, .. } => assert_eq!((reserved, actual), (100, 60)),
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for task in futures::future::join_all(tasks).await {
        task.expect("worker");
    }
    let same: Vec<_> = (0..8)
        .map(|_| {
            let (quotas, t) = (quotas.clone(), t.clone());
            tokio::spawn(async move { reserved(quotas.reserve(&t, &rid("same"), tokens(7)).await.unwrap()) })
        })
        .collect();
    let same: Vec<Reservation> = futures::future::join_all(same).await.into_iter().map(|r| r.unwrap()).collect();

    // Assert: 640 pairs charged 60 each, nothing left reserved but the one "same"
    // reservation, admitted once (the other seven are replays of it)
    let usage = quotas.usage(&t).await.unwrap();
    assert_eq!(bucket(&usage, "plan").used, 640 * 60);
    assert_eq!(bucket(&usage, "plan").reserved, 7);
    assert_eq!((usage.leases, usage.requests_today), (1, 641));
    assert_eq!(same.iter().filter(|r| !r.replayed).count(), 1, "{same:?}");
    assert!(same.iter().all(|r| r.tokens == 7 && r.deadline_ms == same[0].deadline_ms));
    // Fewer script calls than operations: they were shared.
    let calls = seconds.with_label_values(&["reserve_quota"]).get_sample_count()
        + seconds.with_label_values(&["settle_quota"]).get_sample_count();
    assert!(calls < 1288, "1288 operations took {calls} script calls: none were shared");

    // With coalescing off, every operation is its own call.
    quotas.set_coalescing(1);
    let before = seconds.with_label_values(&["reserve_quota"]).get_sample_count();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (quotas, t) = (quotas.clone(), t.clone());
            tokio::spawn(async move { quotas.reserve(&t, &rid(&format!("alone-{i}")), tokens(1)).await.unwrap() })
        })
        .collect();
    futures::future::join_all(tasks).await;
    assert_eq!(seconds.with_label_values(&["reserve_quota"]).get_sample_count() - before, 8);
}

#[tokio::test]
async fn the_daily_request_limit_refuses_with_the_requests_dimension_and_a_release_does_not_give_it_back() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &TenantQuota { daily_requests: 2, ..plan(1000) }).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(1)).await.unwrap());
    h.quotas.release(&t, &rid("r1")).await.unwrap();
    reserved(h.quotas.reserve(&t, &rid("r2"), tokens(1)).await.unwrap());

    // Act
    let third = h.quotas.reserve(&t, &rid("r3"), tokens(1)).await.unwrap();

    // Assert
    assert_eq!(refused(third), Refusal { dimension: Dimension::Requests, available: 0, limit: 2 });
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((usage.requests_today, usage.daily_requests, usage.day.as_str()), (2, 2, "2030-03-15"));
}

// ---------------------------------------------------------------------------------------
// 2. Idempotency
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_retried_reserve_returns_the_first_result_and_reserves_nothing_more() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let first = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());
    let before = h.quotas.usage(&t).await.unwrap();

    // Act: the retry even asks for a different amount
    let retry = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(99)).await.unwrap());

    // Assert
    assert!(!first.replayed);
    assert_eq!(retry, Reservation { replayed: true, ..first.clone() });
    assert_eq!(retry.tokens, 40);
    assert_eq!(first.deadline_ms, noon().timestamp_millis() + 60_000);
    let after = h.quotas.usage(&t).await.unwrap();
    assert_eq!(after, before);
    assert_eq!((bucket(&after, "plan").reserved, after.leases, after.requests_today), (40, 1, 1));
}

#[tokio::test]
async fn a_repeated_settle_is_a_no_op_and_a_release_after_it_says_already_settled() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());

    // Act
    let first = h.quotas.settle(&t, &rid("r1"), count(25), false).await.unwrap();
    let after_first = h.quotas.usage(&t).await.unwrap();
    let second = h.quotas.settle(&t, &rid("r1"), count(35), false).await.unwrap();
    let release = h.quotas.release(&t, &rid("r1")).await.unwrap();
    let replayed_reserve = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());

    // Assert
    assert_eq!(
        first,
        SettleOutcome::Settled {
            reserved: 40,
            actual: 25,
            overdraft: 0,
            charged: parts(&[("plan", 25)]),
            late: false,
            source: Source::Redis
        }
    );
    assert_eq!(second, SettleOutcome::AlreadySettled { reserved: 40, actual: 25, charged: parts(&[("plan", 25)]) });
    assert_eq!(release, ReleaseOutcome::AlreadySettled { reserved: 40, actual: 25, charged: parts(&[("plan", 25)]) });
    assert_eq!((replayed_reserve.replayed, replayed_reserve.state), (true, ReservationState::Settled));
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(usage, after_first);
    assert_eq!((bucket(&usage, "plan").used, bucket(&usage, "plan").reserved, usage.leases), (25, 0, 0));
    assert_eq!(usage.available, 975);
}

#[tokio::test]
async fn a_done_marker_written_in_the_months_hash_before_markers_had_keys_is_still_honoured() {
    // Arrange: a settle recorded the way earlier versions did, as a field of the month
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let deadline = noon().timestamp_millis() + 60_000;
    let mut conn = raw_connection();
    // Counters from before markers had windows: no legacy_until yet.
    redis::cmd("HDEL").arg(h.keys().quota_state("acme")).arg("legacy_until").query::<()>(&mut conn).unwrap();
    redis::cmd("HSET")
        .arg(h.keys().quota_period("acme", "2030-03"))
        .arg("done:old")
        .arg(format!("settled|40|{deadline}|plan:40|25|plan:25"))
        .query::<()>(&mut conn)
        .unwrap();
    let before = h.quotas.usage(&t).await.unwrap();

    // Act
    let settle = h.quotas.settle(&t, &rid("old"), count(30), false).await.unwrap();
    let release = h.quotas.release(&t, &rid("old")).await.unwrap();
    let reserve = reserved(h.quotas.reserve(&t, &rid("old"), tokens(40)).await.unwrap());

    // Assert: answered from the old marker, nothing charged or reserved again
    let charged = parts(&[("plan", 25)]);
    assert_eq!(settle, SettleOutcome::AlreadySettled { reserved: 40, actual: 25, charged: charged.clone() });
    assert_eq!(release, ReleaseOutcome::AlreadySettled { reserved: 40, actual: 25, charged });
    assert_eq!((reserve.replayed, reserve.state), (true, ReservationState::Settled));
    assert_eq!(h.quotas.usage(&t).await.unwrap(), before);
}

#[tokio::test]
async fn a_repeated_release_is_a_no_op_and_a_settle_after_it_says_already_released() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());

    // Act
    let first = h.quotas.release(&t, &rid("r1")).await.unwrap();
    let second = h.quotas.release(&t, &rid("r1")).await.unwrap();
    let settle = h.quotas.settle(&t, &rid("r1"), count(10), false).await.unwrap();

    // Assert
    assert_eq!(first, ReleaseOutcome::Released { reserved: 40, source: Source::Redis });
    assert_eq!(second, ReleaseOutcome::AlreadyReleased { reserved: 40 });
    assert_eq!(settle, SettleOutcome::AlreadyReleased { reserved: 40 });
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").used, bucket(&usage, "plan").reserved, usage.leases), (0, 0, 0));
    assert_eq!(usage.available, 1000);
}

#[tokio::test]
async fn a_request_id_never_reserved_is_unknown_and_an_unpublished_tenant_is_an_error() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;

    // Act
    let settle = h.quotas.settle(&t, &rid("never"), count(1), false).await.unwrap();
    let release = h.quotas.release(&t, &rid("never")).await.unwrap();
    let stranger = h.quotas.reserve(&tenant("nobody"), &rid("r1"), tokens(1)).await;

    // Assert
    assert_eq!(settle, SettleOutcome::Unknown);
    assert_eq!(release, ReleaseOutcome::Unknown);
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").used, 0);
    assert!(matches!(stranger, Err(QuotaError::UnknownTenant(ref who)) if who.as_str() == "nobody"), "{stranger:?}");
}

#[tokio::test]
async fn an_older_snapshot_never_replaces_a_newer_one() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &TenantQuota { version: 2, ..plan(500) }).await;

    // Act
    let older = h.quotas.publish(&t, &TenantQuota { version: 1, ..plan(9000) }).await.unwrap();

    // Assert
    assert_eq!(older, (false, 2));
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((usage.version, usage.available), (2, 500));
}

// ---------------------------------------------------------------------------------------
// 3. Bucket order, expiry, overdraft
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn bonus_grants_pay_by_priority_then_temporary_by_soonest_expiry_then_the_plan() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let day = chrono::Duration::days(1);
    let quota = TenantQuota {
        grants: vec![
            grant("temp-late", GrantKind::Temporary, 10, Some(noon() + day * 10)),
            grant("bonus-p2", bonus(2), 10, None),
            grant("temp-soon", GrantKind::Temporary, 10, Some(noon() + day * 3)),
            grant("bonus-p1", bonus(1), 10, Some(noon() + day * 5)),
            // Would pay first, but expired an hour ago.
            grant("bonus-gone", bonus(0), 99, Some(noon() - chrono::Duration::hours(1))),
            // Expires exactly now: `[starts_at, expires_at)` no longer holds it.
            grant("bonus-ending", bonus(0), 99, Some(noon())),
            // Would pay first, but starts tomorrow.
            Grant { starts_at: Some(noon() + day), ..grant("bonus-soon", bonus(0), 99, None) },
        ],
        ..plan(1000)
    };
    publish(&h, &t, &quota).await;

    // Act
    let r = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());

    // Assert
    assert_eq!(
        r.parts,
        parts(&[("bonus-p1", 10), ("bonus-p2", 10), ("temp-soon", 10), ("temp-late", 10), ("plan", 60)])
    );
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(usage.available, 1040 - 100);
    for dead in ["bonus-gone", "bonus-ending", "bonus-soon"] {
        let b = bucket(&usage, dead);
        assert_eq!((b.live, b.used, b.reserved), (false, 0, 0), "{dead}");
    }
    assert_eq!(bucket(&usage, "bonus-p1").reserved, 10);
    assert_eq!(bucket(&usage, "plan").reserved, 60);
}

#[tokio::test]
async fn usage_lists_buckets_in_paying_order_with_the_plan_last() {
    // Arrange: grants published out of paying order
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let day = chrono::Duration::days(1);
    let quota = TenantQuota {
        grants: vec![
            grant("temp-late", GrantKind::Temporary, 10, Some(noon() + day * 10)),
            grant("bonus-p2", bonus(2), 10, None),
            grant("temp-soon", GrantKind::Temporary, 10, Some(noon() + day * 3)),
            grant("bonus-p1", bonus(1), 10, Some(noon() + day * 5)),
        ],
        ..plan(1000)
    };
    publish(&h, &t, &quota).await;

    // Act
    let usage = h.quotas.usage(&t).await.unwrap();

    // Assert (QuotaUsage::buckets: "In paying order, the plan last.")
    let order: Vec<&str> = usage.buckets.iter().map(|b| b.id.as_str()).collect();
    assert_eq!(order, ["bonus-p1", "bonus-p2", "temp-soon", "temp-late", "plan"]);
}

#[tokio::test]
async fn a_refusal_for_tokens_counts_only_live_grants_in_its_limit() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let quota = TenantQuota {
        grants: vec![
            grant("live", bonus(1), 30, None),
            grant("gone", bonus(1), 500, Some(noon() - chrono::Duration::days(1))),
        ],
        ..plan(100)
    };
    publish(&h, &t, &quota).await;

    // Act
    let outcome = h.quotas.reserve(&t, &rid("r1"), tokens(131)).await.unwrap();

    // Assert
    assert_eq!(refused(outcome), Refusal { dimension: Dimension::Tokens, available: 130, limit: 130 });
}

#[tokio::test]
async fn a_grant_that_expires_between_reserve_and_settle_still_pays_its_part() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let expires = noon() + chrono::Duration::minutes(30);
    publish(&h, &t, &TenantQuota { grants: vec![grant("tmp", GrantKind::Temporary, 50, Some(expires))], ..plan(1000) })
        .await;
    let r = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(80)).await.unwrap());
    assert_eq!(r.parts, parts(&[("tmp", 50), ("plan", 30)]));
    h.clock.set(noon() + chrono::Duration::minutes(45));

    // Act: 100 used, 20 beyond the reservation
    let settled = h.quotas.settle(&t, &rid("r1"), count(100), false).await.unwrap();

    // Assert: the grant pays what it reserved; the excess goes to what is live (the plan)
    assert_eq!(
        settled,
        SettleOutcome::Settled {
            reserved: 80,
            actual: 100,
            overdraft: 20,
            charged: parts(&[("tmp", 50), ("plan", 50)]),
            late: false,
            source: Source::Redis
        }
    );
    let usage = h.quotas.usage(&t).await.unwrap();
    let tmp = bucket(&usage, "tmp");
    assert_eq!((tmp.live, tmp.used, tmp.reserved), (false, 50, 0));
    assert_eq!((bucket(&usage, "plan").used, bucket(&usage, "plan").reserved), (50, 0));
    assert_eq!(usage.available, 950);
}

#[tokio::test]
async fn an_overdraft_takes_the_plan_negative_and_refuses_until_a_grant_brings_the_balance_back_above_zero() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(100)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(80)).await.unwrap());

    // Act
    let settled = h.quotas.settle(&t, &rid("r1"), count(150), false).await.unwrap();

    // Assert: the excess is charged and the plan is 50 below zero
    assert_eq!(
        settled,
        SettleOutcome::Settled {
            reserved: 80,
            actual: 150,
            overdraft: 70,
            charged: parts(&[("plan", 150)]),
            late: false,
            source: Source::Redis
        }
    );
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").used, usage.available), (150, 0));
    let refusal = refused(h.quotas.reserve(&t, &rid("r2"), tokens(1)).await.unwrap());
    assert_eq!(refusal, Refusal { dimension: Dimension::Tokens, available: 0, limit: 100 });

    // A 40-token bonus does not cover the 50 overdrawn.
    publish(&h, &t, &TenantQuota { version: 2, grants: vec![grant("b40", bonus(1), 40, None)], ..plan(100) }).await;
    let refusal = refused(h.quotas.reserve(&t, &rid("r3"), tokens(1)).await.unwrap());
    assert_eq!(refusal, Refusal { dimension: Dimension::Tokens, available: 0, limit: 140 });

    // An 80-token bonus leaves 30.
    publish(&h, &t, &TenantQuota { version: 3, grants: vec![grant("b80", bonus(1), 80, None)], ..plan(100) }).await;
    let refusal = refused(h.quotas.reserve(&t, &rid("r4"), tokens(31)).await.unwrap());
    assert_eq!(refusal, Refusal { dimension: Dimension::Tokens, available: 30, limit: 180 });
    let r = reserved(h.quotas.reserve(&t, &rid("r5"), tokens(30)).await.unwrap());
    assert_eq!(r.parts, parts(&[("b80", 30)]));
    assert_eq!(h.quotas.usage(&t).await.unwrap().available, 0);
}

// ---------------------------------------------------------------------------------------
// 4. The Lua paying order against the engine's
// ---------------------------------------------------------------------------------------

/// A grant id from a small alphabet mixing case, digits, '-' and '_', so that id ties are
/// broken on characters whose order depends on how strings are compared.
fn random_grant_id(rng: &mut ChaCha8Rng, taken: &mut HashSet<String>) -> String {
    const ALPHABET: &[u8] = b"aAbB09-_";
    loop {
        let len = rng.random_range(1..=4);
        let id: String = (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
        if id != "plan" && taken.insert(id.clone()) {
            return id;
        }
    }
}

#[tokio::test]
async fn the_scripts_pay_and_charge_exactly_as_the_engine_plans_for_random_buckets() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let mut rng = ChaCha8Rng::seed_from_u64(0x7e55e7a);
    let midnight = at("2030-03-15T00:00:00Z");

    for case in 0..300 {
        let t = tenant(&format!("case-{case}"));
        let mut taken = HashSet::new();
        let mut grants = Vec::new();
        let mut buckets = Vec::new();
        for _ in 0..rng.random_range(0..=6) {
            let id = random_grant_id(&mut rng, &mut taken);
            let kind = if rng.random_bool(0.5) { GrantKind::Temporary } else { bonus(rng.random_range(0..3)) };
            let amount = rng.random_range(1..=300u64);
            // Whole days from today's midnight: ties are common, day 0 and before have expired.
            let expires_at = rng.random_bool(0.75).then(|| midnight + chrono::Duration::days(rng.random_range(-2..=5)));
            grants.push(grant(&id, kind, amount, expires_at));
            let kind = match kind {
                GrantKind::Temporary => BucketKind::Temporary,
                GrantKind::Bonus { priority } => BucketKind::Bonus { priority },
            };
            buckets.push(Bucket { id, kind, left: amount as i64, expires_at });
        }
        let monthly = rng.random_range(0..=500u64);
        buckets.push(Bucket { id: "plan".into(), kind: BucketKind::Plan, left: monthly as i64, expires_at: None });
        let available = engine::quota::available(&buckets, noon());
        let limit = monthly
            + grants.iter().filter(|g| g.expires_at.is_none_or(|e| e > noon())).map(|g| g.amount.get()).sum::<u64>();
        let cost = rng.random_range(1..=available + 50);
        let actual = rng.random_range(0..=cost * 2);
        publish(&h, &t, &TenantQuota { grants, ..plan(monthly) }).await;
        let context = format!("case {case}: buckets {buckets:?}, cost {cost}, actual {actual}");

        // Act
        let outcome = h.quotas.reserve(&t, &rid("r"), tokens(cost)).await.unwrap();

        // Assert
        match engine::quota::plan_payment(&buckets, cost, noon()) {
            Ok(payments) => {
                let expected: Vec<Part> =
                    payments.iter().map(|p| Part { bucket: p.bucket.clone(), tokens: p.amount }).collect();
                assert_eq!(reserved(outcome).parts, expected, "{context}");

                let charge = engine::quota::charge_overdraft(&buckets, actual, noon()).unwrap();
                let expected: Vec<Part> =
                    charge.payments.iter().map(|p| Part { bucket: p.bucket.clone(), tokens: p.amount }).collect();
                let settled = h.quotas.settle(&t, &rid("r"), count(actual), false).await.unwrap();
                assert_eq!(
                    settled,
                    SettleOutcome::Settled {
                        reserved: cost,
                        actual,
                        overdraft: actual.saturating_sub(cost),
                        charged: expected,
                        late: false,
                        source: Source::Redis
                    },
                    "{context}"
                );
            }
            Err(engine::quota::QuotaError::Insufficient { available, .. }) => {
                assert_eq!(refused(outcome), Refusal { dimension: Dimension::Tokens, available, limit }, "{context}");
            }
            Err(other) => panic!("{context}: {other}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. The sweeper
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn the_sweeper_returns_a_reservation_only_after_its_deadline_and_a_late_settle_is_still_charged() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let r = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());
    assert_eq!(r.deadline_ms, noon().timestamp_millis() + 60_000);

    // Act: one second before the deadline, then one second after
    h.clock.set(noon() + chrono::Duration::seconds(59));
    let early = h.quotas.sweep(&t, 100).await.unwrap();
    let before = h.quotas.usage(&t).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(61));
    let due = h.quotas.sweep(&t, 100).await.unwrap();
    let after = h.quotas.usage(&t).await.unwrap();

    // Assert
    assert_eq!(early, SweepOutcome { released: 0, tokens: 0, left: 0, open: 1, ..SweepOutcome::default() });
    assert_eq!((bucket(&before, "plan").reserved, before.leases), (40, 1));
    assert_eq!(due, SweepOutcome { released: 1, tokens: 40, left: 0, open: 0, ..SweepOutcome::default() });
    assert_eq!((bucket(&after, "plan").reserved, after.leases, after.available), (0, 0, 1000));
    let again = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());
    assert_eq!((again.replayed, again.state), (true, ReservationState::Expired));

    // A settle after the sweep charges what was used, flagged late.
    let settled = h.quotas.settle(&t, &rid("r1"), count(25), false).await.unwrap();
    assert_eq!(
        settled,
        SettleOutcome::Settled {
            reserved: 40,
            actual: 25,
            overdraft: 0,
            charged: parts(&[("plan", 25)]),
            late: true,
            source: Source::Redis
        }
    );
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").used, usage.available), (25, 975));
    let repeated = h.quotas.settle(&t, &rid("r1"), count(25), false).await.unwrap();
    assert_eq!(repeated, SettleOutcome::AlreadySettled { reserved: 40, actual: 25, charged: parts(&[("plan", 25)]) });
    assert_eq!(h.quotas.usage(&t).await.unwrap(), usage);
}

#[tokio::test]
async fn a_sweep_releases_at_most_its_limit_and_reports_what_is_left() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    for i in 0..5 {
        reserved(h.quotas.reserve(&t, &rid(&format!("r{i}")), tokens(10)).await.unwrap());
    }
    h.clock.set(noon() + chrono::Duration::seconds(30));
    reserved(h.quotas.reserve(&t, &rid("fresh"), tokens(7)).await.unwrap());
    h.clock.set(noon() + chrono::Duration::seconds(61));

    // Act
    let first = h.quotas.sweep(&t, 3).await.unwrap();
    let second = h.quotas.sweep(&t, 3).await.unwrap();

    // Assert
    assert_eq!(first, SweepOutcome { released: 3, tokens: 30, left: 2, open: 3, ..SweepOutcome::default() });
    assert_eq!(second, SweepOutcome { released: 2, tokens: 20, left: 0, open: 1, ..SweepOutcome::default() });
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((usage.leases, bucket(&usage, "plan").reserved), (1, 7));
}

// ---------------------------------------------------------------------------------------
// 6. The month turning
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_new_month_refills_the_plan_and_a_reservation_of_the_old_month_is_charged_to_it() {
    // Arrange: November used up, 30 of it still reserved
    let h = harness(Clock::manual(at("2030-11-30T23:59:00Z")));
    let t = tenant("acme");
    publish(&h, &t, &TenantQuota { retention_days: 7, ..plan(100) }).await;
    reserved(h.quotas.reserve(&t, &rid("nov-open"), tokens(30)).await.unwrap());
    reserved(h.quotas.reserve(&t, &rid("nov-done"), tokens(70)).await.unwrap());
    h.quotas.settle(&t, &rid("nov-done"), count(70), false).await.unwrap();
    let november = h.quotas.usage(&t).await.unwrap();
    assert_eq!((november.period.as_str(), november.available), ("2030-11", 0));
    refused(h.quotas.reserve(&t, &rid("nov-more"), tokens(1)).await.unwrap());

    // Act
    h.clock.set(at("2030-12-01T00:00:30Z"));
    let december = h.quotas.usage(&t).await.unwrap();
    let settled = h.quotas.settle(&t, &rid("nov-open"), count(30), false).await.unwrap();
    let after = h.quotas.usage(&t).await.unwrap();

    // Assert
    assert_eq!((december.period.as_str(), december.day.as_str()), ("2030-12", "2030-12-01"));
    assert_eq!(december.available, 100);
    assert_eq!((bucket(&december, "plan").used, bucket(&december, "plan").reserved), (0, 0));
    assert_eq!((december.leases, december.requests_today), (1, 0));
    assert!(
        matches!(settled, SettleOutcome::Settled { reserved: 30, actual: 30, overdraft: 0, late: false, ref charged, .. } if *charged == parts(&[("plan", 30)])),
        "{settled:?}"
    );
    assert_eq!((after.available, bucket(&after, "plan").used, after.leases), (100, 0, 0));

    let mut conn = raw_connection();
    let nov_key = h.keys().quota_period(t.as_str(), "2030-11");
    let nov_used: u64 = redis::cmd("HGET").arg(&nov_key).arg("plan_used").query(&mut conn).unwrap();
    assert_eq!(nov_used, 100);
    let expire_at: i64 = redis::cmd("PEXPIRETIME").arg(&nov_key).query(&mut conn).unwrap();
    assert_eq!(expire_at, at("2030-12-08T00:00:00Z").timestamp_millis());
    let pttl: i64 = redis::cmd("PTTL").arg(&nov_key).query(&mut conn).unwrap();
    assert!(pttl > 0, "{pttl}");
    let left_reserved: Option<String> =
        redis::cmd("HGET").arg(h.keys().quota_state(t.as_str())).arg("r:plan:2030-11").query(&mut conn).unwrap();
    assert_eq!(left_reserved, None);
    let repeated = h.quotas.settle(&t, &rid("nov-open"), count(30), false).await.unwrap();
    assert!(matches!(repeated, SettleOutcome::AlreadySettled { reserved: 30, actual: 30, .. }), "{repeated:?}");
}

// ---------------------------------------------------------------------------------------
// 7. Amounts
// ---------------------------------------------------------------------------------------

#[test]
fn amounts_beyond_two_pow_53_minus_one_or_below_one_are_refused_naming_the_field() {
    assert_eq!(Tokens::parse("tokens", (1 << 53) - 1).unwrap().get(), (1 << 53) - 1);
    for bad in [1i128 << 53, 0, -1, -(1 << 60)] {
        let err = Tokens::parse("tokens", bad).unwrap_err();
        assert_eq!(err.field, "tokens", "{bad}");
    }
    assert_eq!(TokenCount::parse("actual_tokens", 0).unwrap().get(), 0);
    assert_eq!(TokenCount::parse("actual_tokens", -1).unwrap_err().field, "actual_tokens");
}

#[tokio::test]
async fn the_largest_amount_round_trips_through_the_scripts_exactly() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let max = (1u64 << 53) - 1;
    publish(&h, &t, &plan(max)).await;

    // Act
    let r = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(max - 1)).await.unwrap());
    let settled = h.quotas.settle(&t, &rid("r1"), count(max), false).await.unwrap();

    // Assert
    assert_eq!(r.parts, parts(&[("plan", max - 1)]));
    assert!(
        matches!(settled, SettleOutcome::Settled { overdraft: 1, ref charged, .. } if *charged == parts(&[("plan", max)])),
        "{settled:?}"
    );
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").used, usage.available), (max, 0));
}

// ---------------------------------------------------------------------------------------
// 8. The script cache
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_lost_quota_library_or_script_cache_between_two_reserves_reaches_no_caller() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(10)).await.unwrap());
    let library = client::scripts::quota().library.name();

    // Act: Redis forgets the quota functions and the scripts (as a restart would)
    let () = redis::cmd("FUNCTION").arg("DELETE").arg(library).query(&mut raw_connection()).unwrap();
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut raw_connection()).unwrap();
    let second = h.quotas.reserve(&t, &rid("r2"), tokens(10)).await;
    let settled = h.quotas.settle(&t, &rid("r1"), count(4), false).await;

    // Assert: both loaded the library again and ran once
    let second = reserved(second.expect("a reserve after FUNCTION DELETE"));
    assert!(!second.replayed);
    settled.expect("a settle after FUNCTION DELETE");
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").reserved, bucket(&usage, "plan").used), (10, 4));
    let listed: Vec<redis::Value> =
        redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg(library).query(&mut raw_connection()).unwrap();
    assert_eq!(listed.len(), 1, "the library is loaded again: {listed:?}");
}

#[tokio::test]
async fn pruning_removes_only_the_quota_libraries_of_other_builds() {
    // Arrange: this build's library (loaded by a reserve), an older build's, and a library
    // that is not Tessera's
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(10)).await.unwrap());
    let current = client::scripts::quota().library.name();
    let (old, other) = ("tessera_quota_00000000000000aa", "not_tessera_prune_test");
    for name in [old, other] {
        let code = format!("#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)");
        let _: String =
            redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(code).query(&mut raw_connection()).unwrap();
    }
    let mut conn = handle_for(&redis_url()).connection().await.unwrap();
    let before = client::scripts::quota_libraries(&mut conn).await.unwrap();

    // Act
    let removed = client::scripts::prune_quota_libraries(&mut conn).await.unwrap();
    let again = client::scripts::prune_quota_libraries(&mut conn).await.unwrap();

    // Assert: the old build's is gone (other stale builds' may be too), this build's and the
    // foreign one stay, and quota calls go on
    assert!(before.contains(&(old.to_owned(), false)), "{before:?}");
    assert!(before.iter().all(|(name, mine)| *mine == (name == current)), "{before:?}");
    assert!(!before.iter().any(|(name, _)| name == other), "{before:?}");
    assert!(removed.iter().any(|name| name == old), "{removed:?}");
    assert!(!removed.iter().any(|name| name == current), "{removed:?}");
    assert!(!again.iter().any(|name| name == old), "{again:?}");
    let listed = |name: &str| -> usize {
        let found: Vec<redis::Value> =
            redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg(name).query(&mut raw_connection()).unwrap();
        found.len()
    };
    assert_eq!((listed(old), listed(other)), (0, 1));
    h.quotas.settle(&t, &rid("r1"), count(4), false).await.expect("a settle after the prune");
    let () = redis::cmd("FUNCTION").arg("DELETE").arg(other).query(&mut raw_connection()).unwrap();
}

// ---------------------------------------------------------------------------------------
// 9. The Redis clock
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn on_the_redis_clock_a_reserve_and_a_settle_work_end_to_end() {
    // Arrange
    let h = harness(Clock::Redis);
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let local_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;

    // Act
    let r = reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());
    let settled = h.quotas.settle(&t, &rid("r1"), count(15), false).await.unwrap();
    let usage = h.quotas.usage(&t).await.unwrap();

    // Assert
    assert_eq!(r.parts, parts(&[("plan", 40)]));
    let ttl_seen = r.deadline_ms - local_now;
    assert!((55_000..=65_000).contains(&ttl_seen), "deadline {} is {ttl_seen} ms from now", r.deadline_ms);
    assert!(matches!(settled, SettleOutcome::Settled { actual: 15, late: false, .. }), "{settled:?}");
    assert_eq!(usage.period, Period::of(Utc::now()).to_string());
    assert_eq!((bucket(&usage, "plan").used, usage.available, usage.leases), (15, 985, 0));
}

// ---------------------------------------------------------------------------------------
// 10. Redis unreachable
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn with_no_redis_a_tenant_never_seen_is_refused_as_unavailable() {
    // Arrange: nothing listens on port 1
    let h = harness_at("redis://127.0.0.1:1", Clock::manual(noon()));
    let t = tenant("acme");

    // Act
    let outcome = h.quotas.reserve(&t, &rid("r1"), tokens(10)).await;

    // Assert
    match outcome {
        Err(QuotaError::Unavailable { tenant, policy, .. }) => {
            assert_eq!((tenant.as_str(), policy), ("acme", "fail_closed"));
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_fail_open_limited_tenant_is_admitted_within_its_allowance_while_redis_is_away_and_charged_when_it_returns() {
    // Arrange: two tenants, their policies learned from Redis through the proxy
    let proxy = Proxy::start(redis_address()).await;
    let proxied = through(&redis_url(), proxy.addr());
    let h = harness_at(&proxied, Clock::manual(noon()));
    let open = tenant("open");
    let closed = tenant("closed");
    let allowance = Tokens::parse("fallback_allowance", 100).unwrap();
    publish(&h, &open, &TenantQuota { fallback: FallbackPolicy::FailOpenLimited { allowance }, ..plan(1000) }).await;
    publish(&h, &closed, &plan(1000)).await;
    for t in [&open, &closed] {
        reserved(h.quotas.reserve(t, &rid("warm-up"), tokens(1)).await.unwrap());
        h.quotas.release(t, &rid("warm-up")).await.unwrap();
    }
    reserved(h.quotas.reserve(&open, &rid("held"), tokens(10)).await.unwrap());

    // Act: Redis goes away
    proxy.cut().await;
    let first = h.quotas.reserve(&open, &rid("r1"), tokens(60)).await.unwrap();
    let second = h.quotas.reserve(&open, &rid("r2"), tokens(50)).await.unwrap();
    let refused_closed = h.quotas.reserve(&closed, &rid("r1"), tokens(1)).await;
    let settled = h.quotas.settle(&open, &rid("r1"), count(20), false).await.unwrap();
    let queued = h.quotas.settle(&open, &rid("held"), count(7), false).await.unwrap();
    let pending = h.quotas.offline_summary();

    // Assert: what was decided without Redis
    let first = reserved(first);
    assert_eq!(
        (first.tokens, first.source, first.state, first.replayed),
        (60, Source::Fallback, ReservationState::Open, false)
    );
    assert_eq!(refused(second), Refusal { dimension: Dimension::FallbackAllowance, available: 40, limit: 100 });
    assert!(matches!(refused_closed, Err(QuotaError::Unavailable { policy: "fail_closed", .. })), "{refused_closed:?}");
    assert_eq!(
        settled,
        SettleOutcome::Settled {
            reserved: 60,
            actual: 20,
            overdraft: 0,
            charged: Vec::new(),
            late: false,
            source: Source::Fallback
        }
    );
    assert_eq!(queued, SettleOutcome::Queued);
    assert_eq!((pending.operations, pending.admitted_tokens), (2, 60));

    // Act: Redis is back; the next operation that reaches it charges the journal first.
    // Staying away longer than the connection manager's reconnect attempt (two tries, at
    // most 2 s apart) leaves it holding a failed reconnection, which the first call after
    // Redis returns still gets (and which starts a new one); after a failure the client
    // skips Redis for `RETRY_REDIS_AFTER` (500 ms): calls 200 ms apart fail for a moment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.restore();
    let mut failures = Vec::new();
    let usage = loop {
        match h.quotas.usage(&open).await {
            Ok(usage) => break usage,
            Err(e) if failures.len() < 20 => {
                failures.push(e.to_string());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("redis did not come back within 4 s: {e} after {failures:?}"),
        }
    };

    // Assert
    assert_eq!((bucket(&usage, "plan").used, bucket(&usage, "plan").reserved, usage.leases), (27, 0, 0));
    assert_eq!(usage.requests_today, 3);
    assert_eq!(h.quotas.offline_summary().operations, 0);
    let replayed = h.quotas.settle(&open, &rid("r1"), count(20), false).await.unwrap();
    assert!(matches!(replayed, SettleOutcome::AlreadySettled { reserved: 60, actual: 20, .. }), "{replayed:?}");
}

/// A disk that holds `room` bytes of journal (a real file underneath) and then answers
/// "no space", as a full disk does; `room` can be raised (space freed).
struct FillingDisk {
    file: std::fs::File,
    room: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl client::quota::JournalDisk for FillingDisk {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let len = self.file.metadata()?.len();
        let room = self.room.load(std::sync::atomic::Ordering::SeqCst);
        if len + bytes.len() as u64 > room {
            // As a full disk: what fits is written, then the error.
            let fits = room.saturating_sub(len) as usize;
            self.file.write_all(&bytes[..fits.min(bytes.len())])?;
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"));
        }
        self.file.write_all(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn size(&mut self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn cut(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
}

#[tokio::test]
async fn a_fail_open_limited_tenant_is_admitted_only_once_its_journal_line_is_on_disk() {
    // Arrange: a fail_open_limited tenant, its policy learned through the proxy; the
    // journal on a disk with room for one admission's line.
    let proxy = Proxy::start(redis_address()).await;
    let h = harness_at(&through(&redis_url(), proxy.addr()), Clock::manual(noon()));
    let open = tenant("journaled");
    let allowance = Tokens::parse("fallback_allowance", 1000).unwrap();
    publish(&h, &open, &TenantQuota { fallback: FallbackPolicy::FailOpenLimited { allowance }, ..plan(10_000) }).await;
    reserved(h.quotas.reserve(&open, &rid("warm-up"), tokens(1)).await.unwrap());
    h.quotas.release(&open, &rid("warm-up")).await.unwrap();
    let path = std::env::temp_dir().join(format!("tessera-filling-journal-{}", std::process::id()));
    // Opened for appending, as the journal opens its file: writes after a cut go to the end.
    std::fs::remove_file(&path).ok();
    let file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&path).unwrap();
    let room = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(80));
    h.quotas.journal_on(FillingDisk { file, room: room.clone() }).unwrap();
    proxy.cut().await;

    // Act and assert: the first admission fits; the second does not, and is refused with
    // nothing kept, in memory or on disk (no torn line either), however often it is retried.
    assert_eq!(reserved(h.quotas.reserve(&open, &rid("r1"), tokens(60)).await.unwrap()).source, Source::Fallback);
    let on_disk = std::fs::read_to_string(&path).unwrap();
    assert_eq!(on_disk.lines().count(), 1, "{on_disk}");
    for _ in 0..2 {
        let second = h.quotas.reserve(&open, &rid("r2"), tokens(50)).await;
        assert!(matches!(second, Err(QuotaError::NotRecorded { .. })), "{second:?}");
        assert_eq!((h.quotas.offline_summary().operations, h.quotas.offline_summary().admitted_tokens), (1, 60));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), on_disk, "the failed line is cut off the file");
    }
    // A settle of the admission that cannot be written leaves it open, to settle again.
    let settle = h.quotas.settle(&open, &rid("r1"), count(20), false).await;
    assert!(matches!(settle, Err(QuotaError::NotRecorded { .. })), "{settle:?}");
    // An operation for a tenant this process does not know is not queued at all.
    let stranger = h.quotas.release(&tenant("stranger"), &rid("x")).await;
    assert!(matches!(stranger, Err(QuotaError::NotRecorded { .. })), "{stranger:?}");
    assert_eq!(h.quotas.offline_summary().operations, 1);

    // Space is freed: the same operations go through, each written once.
    room.store(1 << 20, std::sync::atomic::Ordering::SeqCst);
    let settled = h.quotas.settle(&open, &rid("r1"), count(20), false).await.unwrap();
    assert!(matches!(settled, SettleOutcome::Settled { reserved: 60, actual: 20, .. }), "{settled:?}");
    assert_eq!(reserved(h.quotas.reserve(&open, &rid("r2"), tokens(50)).await.unwrap()).tokens, 50);
    let lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()), "{lines:?}");
    assert_eq!(h.quotas.offline_summary().admitted_tokens, 110);
    std::fs::remove_file(&path).ok();
}

#[tokio::test]
async fn an_overdraft_settled_in_a_new_month_gives_that_months_counters_their_expiry() {
    // Arrange: a reservation in the last second of December.
    let clock = Clock::manual(at("2030-12-31T23:59:59Z"));
    let h = harness(clock.clone());
    let t = tenant("turn");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(100)).await.unwrap());

    // Act: settled in January, beyond what was reserved.
    clock.set(at("2031-01-01T00:00:05Z"));
    let settled = h.quotas.settle(&t, &rid("r1"), count(150), false).await.unwrap();

    // Assert: January's hash (written first by the overdraft) expires at January's end
    // plus the retention; December's keeps its own.
    assert!(matches!(settled, SettleOutcome::Settled { overdraft: 50, .. }), "{settled:?}");
    let mut conn = raw_connection();
    let january: i64 =
        redis::cmd("PEXPIRETIME").arg(h.keys().quota_period("turn", "2031-01")).query(&mut conn).unwrap();
    let december: i64 =
        redis::cmd("PEXPIRETIME").arg(h.keys().quota_period("turn", "2030-12")).query(&mut conn).unwrap();
    assert_eq!(january, at("2031-03-03T00:00:00Z").timestamp_millis()); // Feb 1 + 30 days
    assert_eq!(december, at("2031-01-31T00:00:00Z").timestamp_millis()); // Jan 1 + 30 days
}
