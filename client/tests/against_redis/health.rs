//! Outcome reports against a real Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`):
//! `lua/record_outcome.lua` as `Outcomes` calls it, under a hand-set clock, under
//! concurrency, pipelined, after a script cache flush, read back and pruned by minute, and
//! with Redis unreachable.
//!
//! Every test writes under its own random key prefix and removes its keys afterwards
//! (`SCAN MATCH <prefix>:*` + `UNLINK`, also when the test panics); tests run in parallel.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::{at, raw_connection, redis_url, KeyGuard};
use chrono::{DateTime, Utc};
use client::health::{ChannelCode, MinuteCounts, OutcomeCounts, OutcomeError, Totals, MAX_REPORTS_PER_CALL, RETENTION};
use client::{Clock, OutcomeMetrics, Outcomes};
use prometheus::{HistogramOpts, HistogramVec, Registry};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

struct Harness {
    outcomes: Outcomes,
    metrics: OutcomeMetrics,
    guard: KeyGuard,
}

fn harness(clock: Clock) -> Harness {
    harness_at(&redis_url(), clock)
}

fn harness_at(url: &str, clock: Clock) -> Harness {
    let guard = KeyGuard::new("hl");
    let handle = crate::support::handle_for(url);
    let script_seconds =
        HistogramVec::new(HistogramOpts::new("test_script_seconds", "script latency"), &["script"]).unwrap();
    let metrics = OutcomeMetrics::register(&Registry::new(), script_seconds).unwrap();
    let outcomes = Outcomes::new(handle, guard.keys.clone(), clock, Some(metrics.clone()));
    Harness { outcomes, metrics, guard }
}

impl Harness {
    fn recorded(&self, result: &str) -> u64 {
        self.metrics.recorded.with_label_values(&[result]).get()
    }

    fn dropped(&self, reason: &str) -> u64 {
        self.metrics.dropped.with_label_values(&[reason]).get()
    }

    /// The channel's hash as Redis holds it.
    fn raw(&self, channel: &ChannelCode) -> HashMap<String, u64> {
        redis::cmd("HGETALL").arg(self.guard.keys.health(channel.as_str())).query(&mut raw_connection()).unwrap()
    }
}

/// 12:00:30 on a day years ahead of any real clock.
fn noon() -> DateTime<Utc> {
    at("2030-03-15T12:00:30Z")
}

fn minute_of(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

fn channel(code: &str) -> ChannelCode {
    ChannelCode::parse(code).unwrap()
}

fn counts(ok: u64, fail: u64, latency_ms_sum: u64, latency_count: u64) -> OutcomeCounts {
    OutcomeCounts::new(ok, fail, latency_ms_sum, latency_count).unwrap()
}

fn minute(minute: i64, ok: u64, fail: u64, latency_ms_sum: u64, latency_count: u64) -> MinuteCounts {
    MinuteCounts { minute, ok, fail, latency_ms_sum, latency_count }
}

// ---------------------------------------------------------------------------------------
// 1. Minutes by the one clock
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn reports_land_in_the_minute_of_the_hand_set_clock() {
    // Arrange
    let clock = Clock::manual(noon());
    let h = harness(clock.clone());
    let a = channel("ALIPAY_A");
    let m = minute_of(noon());

    // Act: three reports in 12:00, one in 12:01 (at its first millisecond)
    let first = h.outcomes.record(&a, true, Some(Duration::from_millis(120))).await.unwrap();
    let second = h.outcomes.record(&a, false, None).await.unwrap();
    let third = h.outcomes.record_counts(&a, &counts(3, 1, 400, 2)).await.unwrap();
    clock.set(at("2030-03-15T12:01:00Z"));
    let fourth = h.outcomes.record(&a, false, Some(Duration::from_millis(900))).await.unwrap();

    // Assert
    assert_eq!((first, second, third, fourth), (m, m, m, m + 1));
    assert_eq!(h.outcomes.now_minute().await.unwrap(), m + 1);
    assert_eq!(
        h.outcomes.window(&a, m - 5, m + 5).await.unwrap(),
        vec![minute(m, 4, 2, 520, 3), minute(m + 1, 0, 1, 900, 1)]
    );
    // The fields as the evaluation job's contract names them; a zero is not written.
    let raw = h.raw(&a);
    let expected: HashMap<String, u64> = [
        (format!("{m}:ok"), 4),
        (format!("{m}:fail"), 2),
        (format!("{m}:lat_ms"), 520),
        (format!("{m}:lat_n"), 3),
        (format!("{}:fail", m + 1), 1),
        (format!("{}:lat_ms", m + 1), 900),
        (format!("{}:lat_n", m + 1), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(raw, expected);
    assert_eq!((h.recorded("ok"), h.recorded("fail"), h.dropped("unreachable")), (4, 3, 0));
}

#[tokio::test]
async fn the_hash_lives_two_hours_after_its_last_write_under_the_channels_hash_tag() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let a = channel("pay.v2-x");
    let key = h.guard.keys.health(a.as_str());
    h.outcomes.record(&a, true, None).await.unwrap();
    redis::cmd("EXPIRE").arg(&key).arg(60).query::<()>(&mut raw_connection()).unwrap();

    // Act
    h.outcomes.record(&a, true, None).await.unwrap();

    // Assert
    assert!(key.ends_with(":health:{pay.v2-x}"), "{key}");
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut raw_connection()).unwrap();
    assert!((RETENTION.as_secs() as i64 - 5..=RETENTION.as_secs() as i64).contains(&ttl), "ttl {ttl}");
}

#[tokio::test]
async fn on_the_redis_clock_a_report_lands_in_the_current_minute() {
    // Arrange
    let h = harness(Clock::Redis);
    let a = channel("WECHAT_B");
    let before = minute_of(Utc::now());

    // Act
    let written = h.outcomes.record(&a, true, None).await.unwrap();
    let now = h.outcomes.now_minute().await.unwrap();

    // Assert: Redis runs on this machine's clock (a minute may turn meanwhile)
    let after = minute_of(Utc::now());
    assert!((before..=after).contains(&written), "{before} <= {written} <= {after}");
    assert!((written..=after).contains(&now), "{written} <= {now} <= {after}");
    assert_eq!(Totals::of(&h.outcomes.window(&a, written, written).await.unwrap()).ok, 1);
}

// ---------------------------------------------------------------------------------------
// 2. Concurrency and pipelining
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_tasks_of_a_hundred_reports_each_sum_exactly() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let a = channel("ALIPAY_A");
    let m = minute_of(noon());

    // Act: task t's report j failed when j % 4 == 0 and took j ms when j is odd
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (outcomes, a) = (h.outcomes.clone(), a.clone());
            tokio::spawn(async move {
                for j in 0..100u64 {
                    let latency = (j % 2 == 1).then(|| Duration::from_millis(j));
                    outcomes.record(&a, j % 4 != 0, latency).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    // Assert
    let odd_sum: u64 = (0..100).filter(|j| j % 2 == 1).sum();
    assert_eq!(h.outcomes.window(&a, m, m).await.unwrap(), vec![minute(m, 32 * 75, 32 * 25, 32 * odd_sum, 32 * 50)]);
    assert_eq!((h.recorded("ok"), h.recorded("fail")), (32 * 75, 32 * 25));
}

#[tokio::test]
async fn record_many_counts_every_report_in_its_channel_and_returns_each_minute() {
    // Arrange: five channels, two reports of the first
    let h = harness(Clock::manual(noon()));
    let m = minute_of(noon());
    let codes = ["A", "B", "C", "D", "E"];
    let mut reports: Vec<(ChannelCode, OutcomeCounts)> = codes
        .iter()
        .enumerate()
        .map(|(i, c)| (channel(c), counts(i as u64 + 1, 1, 10 * (i as u64 + 2), i as u64 + 2)))
        .collect();
    reports.push((channel("A"), counts(100, 0, 0, 0)));

    // Act
    let minutes = h.outcomes.record_many(&reports).await.unwrap();
    let nothing = h.outcomes.record_many(&[]).await.unwrap();

    // Assert
    assert_eq!(minutes, vec![m; 6]);
    assert!(nothing.is_empty());
    assert_eq!(h.outcomes.window(&channel("A"), m, m).await.unwrap(), vec![minute(m, 101, 1, 20, 2)]);
    for (i, c) in codes.iter().enumerate().skip(1) {
        let i = i as u64;
        assert_eq!(
            h.outcomes.window(&channel(c), m, m).await.unwrap(),
            vec![minute(m, i + 1, 1, 10 * (i + 2), i + 2)],
            "{c}"
        );
    }
    assert_eq!((h.recorded("ok"), h.recorded("fail")), (115, 5));
}

#[tokio::test]
async fn record_many_runs_one_evalsha_per_report_in_one_call() {
    // Arrange: 2,000 reports over 20 channels
    let h = harness(Clock::manual(noon()));
    let m = minute_of(noon());
    let reports: Vec<_> = (0..2000).map(|i| (channel(&format!("ch-{}", i % 20)), counts(1, 0, 0, 0))).collect();
    h.outcomes.record(&channel("warm-up"), true, None).await.unwrap();
    let calls_before = evalsha_calls();

    // Act
    let minutes = h.outcomes.record_many(&reports).await.unwrap();

    // Assert: every report counted once; Redis ran at least 2,000 EVALSHAs (other tests
    // run beside this one, so only a lower bound holds)
    assert_eq!(minutes.len(), 2000);
    assert!(minutes.iter().all(|&x| x == m));
    for i in 0..20 {
        assert_eq!(Totals::of(&h.outcomes.window(&channel(&format!("ch-{i}")), m, m).await.unwrap()).ok, 100);
    }
    assert!(evalsha_calls() >= calls_before + 2000);
}

/// `cmdstat_evalsha:calls=N,...` from `INFO commandstats`, summed over every primary.
fn evalsha_calls() -> u64 {
    let mut calls = 0;
    for url in crate::support::primary_urls().unwrap() {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn).unwrap();
        calls += info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map(|n| n.parse::<u64>().unwrap())
            .unwrap_or(0);
    }
    calls
}

// ---------------------------------------------------------------------------------------
// 3. The script cache
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn after_a_script_flush_reports_are_recorded_exactly_once() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let m = minute_of(noon());
    let a = channel("ALIPAY_A");
    h.outcomes.record(&a, true, None).await.unwrap();
    let flush = || redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut raw_connection()).unwrap();

    // Act: several rounds, since other tests running beside this one may load the script
    // again between a flush and the call that follows it
    let reports: Vec<_> = (0..10).map(|_| (a.clone(), counts(2, 1, 0, 0))).collect();
    let mut results = Vec::new();
    for _ in 0..3 {
        flush();
        let single = h.outcomes.record(&a, false, None).await;
        flush();
        let many = h.outcomes.record_many(&reports).await;
        results.push((single, many));
    }

    // Assert: nothing was lost and nothing counted twice
    for (single, many) in results {
        assert_eq!(single.unwrap(), m);
        assert_eq!(many.unwrap(), vec![m; 10]);
    }
    assert_eq!(h.outcomes.window(&a, m, m).await.unwrap(), vec![minute(m, 1 + 3 * 20, 3 * 11, 0, 0)]);
    assert_eq!((h.dropped("unreachable"), h.dropped("error")), (0, 0));
}

// ---------------------------------------------------------------------------------------
// 4. Reading and pruning for the evaluation job
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_window_returns_its_minutes_in_order_and_omits_minutes_without_reports() {
    // Arrange: reports in minutes m, m+1, m+3 (none in m+2)
    let clock = Clock::manual(noon());
    let h = harness(clock.clone());
    let a = channel("ALIPAY_A");
    let m = minute_of(noon());
    for (offset, ok) in [(0, 1), (1, 2), (3, 4)] {
        clock.set(noon() + chrono::Duration::minutes(offset));
        h.outcomes.record_counts(&a, &counts(ok, 0, 0, 0)).await.unwrap();
    }
    h.outcomes.record(&channel("OTHER"), false, None).await.unwrap();

    // Act
    let all = h.outcomes.window(&a, m, m + 3).await.unwrap();
    let inner = h.outcomes.window(&a, m + 1, m + 2).await.unwrap();
    let reversed = h.outcomes.window(&a, m + 3, m).await.unwrap();
    let unknown = h.outcomes.window(&channel("NEVER"), m, m + 3).await.unwrap();

    // Assert
    assert_eq!(all, vec![minute(m, 1, 0, 0, 0), minute(m + 1, 2, 0, 0, 0), minute(m + 3, 4, 0, 0, 0)]);
    assert_eq!(inner, vec![minute(m + 1, 2, 0, 0, 0)]);
    assert!(reversed.is_empty() && unknown.is_empty());
    assert_eq!(Totals::of(&all).failure_ratio(), Some(0.0));
}

#[tokio::test]
async fn prune_removes_the_minutes_before_the_cut_and_leaves_other_fields() {
    // Arrange: four fields in each of minutes m..m+3, and a field the job keeps
    let clock = Clock::manual(noon());
    let h = harness(clock.clone());
    let a = channel("ALIPAY_A");
    let m = minute_of(noon());
    for offset in 0..4 {
        clock.set(noon() + chrono::Duration::minutes(offset));
        h.outcomes.record_counts(&a, &counts(1, 1, 5, 1)).await.unwrap();
    }
    let key = h.guard.keys.health(a.as_str());
    redis::cmd("HSET").arg(&key).arg("evaluated").arg(m).query::<()>(&mut raw_connection()).unwrap();

    // Act
    let removed = h.outcomes.prune(&a, m + 2).await.unwrap();
    let again = h.outcomes.prune(&a, m + 2).await.unwrap();
    let nothing = h.outcomes.prune(&channel("NEVER"), m + 2).await.unwrap();

    // Assert
    assert_eq!((removed, again, nothing), (8, 0, 0));
    assert_eq!(
        h.outcomes.window(&a, m - 10, m + 10).await.unwrap(),
        vec![minute(m + 2, 1, 1, 5, 1), minute(m + 3, 1, 1, 5, 1)]
    );
    assert_eq!(h.raw(&a).get("evaluated"), Some(&(m as u64)));
}

// ---------------------------------------------------------------------------------------
// 5. Refusals and Redis unreachable
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_reports_are_refused_before_anything_reaches_redis() {
    // Arrange
    let h = harness(Clock::manual(noon()));

    // Act
    let zero = OutcomeCounts::new(0, 0, 0, 0);
    let too_many_latencies = OutcomeCounts::new(1, 1, 30, 3);
    let bad_code = ChannelCode::parse("ALIPAY:A");
    let too_many: Vec<_> = (0..=MAX_REPORTS_PER_CALL).map(|_| (channel("A"), counts(1, 0, 0, 0))).collect();
    let batch = h.outcomes.record_many(&too_many).await;
    // Counts built field by field skip `new`: the client checks them again.
    let empty = h.outcomes.record_counts(&channel("A"), &OutcomeCounts::default()).await;
    let huge = OutcomeCounts { ok: 2_000_000_000, ..Default::default() };
    let one_bad = h.outcomes.record_many(&[(channel("A"), counts(1, 0, 0, 0)), (channel("B"), huge)]).await;

    // Assert
    assert_eq!(zero.unwrap_err().field, "ok");
    assert_eq!(too_many_latencies.unwrap_err().field, "latency_count");
    assert_eq!(bad_code.unwrap_err().field, "channel");
    for (result, field) in [(batch, "reports"), (empty.map(|m| vec![m]), "ok"), (one_bad, "reports[1].ok")] {
        match result {
            Err(OutcomeError::Invalid(e)) => assert_eq!(e.field, field),
            other => panic!("expected Invalid naming {field}, got {other:?}"),
        }
    }
    assert!(h.guard.all_keys().is_empty(), "{:?}", h.guard.all_keys());
    assert_eq!((h.recorded("ok"), h.dropped("unreachable"), h.dropped("error")), (0, 0, 0));
}

#[tokio::test]
async fn without_redis_a_report_fails_fast_as_unavailable_and_is_counted_as_dropped() {
    // Arrange: nothing listens on port 1
    let h = harness_at("redis://127.0.0.1:1", Clock::manual(noon()));
    let a = channel("ALIPAY_A");

    // Act
    let started = Instant::now();
    let first = h.outcomes.record(&a, true, None).await;
    let second = h.outcomes.record_many(&[(a.clone(), counts(1, 0, 0, 0)), (a.clone(), counts(0, 1, 0, 0))]).await;
    let read = h.outcomes.window(&a, 0, 1).await;
    let elapsed = started.elapsed();

    // Assert
    assert!(matches!(first, Err(OutcomeError::Unavailable(_))), "{first:?}");
    assert!(second.as_ref().is_err_and(OutcomeError::is_unavailable), "{second:?}");
    assert!(read.as_ref().is_err_and(OutcomeError::is_unavailable), "{read:?}");
    assert_eq!((h.dropped("unreachable"), h.recorded("ok")), (3, 0));
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}
