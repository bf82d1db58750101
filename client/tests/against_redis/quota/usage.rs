//! The usage stream, counters restored from the ledger, and ledger rows charged to counters
//! that lost them (`lua/quota_lib.lua` record_usage, `lua/publish_tenant.lua`,
//! `lua/apply_usage.lua`).

use std::collections::BTreeMap;
use std::time::Duration;

use client::quota::{Applied, Published, Restore, UsageOutcome, UsageRecord};

use super::*;

async fn stream(h: &Harness, t: &TenantId) -> Vec<UsageRecord> {
    h.quotas.read_usage(std::slice::from_ref(t), 100).await.unwrap()
}

async fn wipe(h: &Harness) {
    let mut conn = raw_connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg(h.keys().scan_pattern()).query(&mut conn).unwrap();
    if !keys.is_empty() {
        redis::cmd("DEL").arg(keys).query::<()>(&mut conn).unwrap();
    }
}

#[tokio::test]
async fn settles_releases_and_expiries_are_appended_to_the_usage_stream_by_the_script_that_made_them() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let mut quota = plan(1000);
    quota.grants = vec![grant("gift", bonus(0), 30, None)];
    publish(&h, &t, &quota).await;
    for (r, n) in [("s1", 50), ("r1", 10), ("e1", 5)] {
        reserved(h.quotas.reserve(&t, &rid(r), tokens(n)).await.unwrap());
    }

    // Act
    h.quotas.settle(&t, &rid("s1"), count(45), false).await.unwrap();
    h.quotas.release(&t, &rid("r1")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(61));
    h.quotas.sweep(&t, 100).await.unwrap();
    let records = stream(&h, &t).await;

    // Assert: one record each, in order, with what each bucket paid.
    let by: BTreeMap<&str, &UsageRecord> = records.iter().map(|r| (r.request_id.as_str(), r)).collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let s = by["s1"];
    assert_eq!((s.outcome, s.reserved, s.actual, s.late), (UsageOutcome::Settled, 50, Some(45), false));
    assert_eq!(s.charged, parts(&[("gift", 30), ("plan", 15)]));
    assert_eq!(s.plan_periods, vec![("2030-03".to_owned(), 15)]);
    assert_eq!((s.reserved_at_ms, s.at_ms), (noon().timestamp_millis(), noon().timestamp_millis()));
    assert!(!s.generation.is_empty(), "published counters have a generation");
    assert_eq!((by["r1"].outcome, by["r1"].actual, by["r1"].charged.len()), (UsageOutcome::Released, None, 0));
    assert_eq!((by["e1"].outcome, by["e1"].reserved), (UsageOutcome::Expired, 5));

    // Read again before acknowledging: the same records (a failed commit loses nothing);
    // acknowledged: gone.
    assert_eq!(stream(&h, &t).await.len(), 3);
    h.quotas.ack_usage(&records).await.unwrap();
    assert!(stream(&h, &t).await.is_empty());
    assert_eq!(h.quotas.usage_backlog(&t).await.unwrap(), 0);
}

#[tokio::test]
async fn the_process_keeps_each_settle_it_made_until_it_is_taken_for_the_ledger() {
    // Arrange
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("s1"), tokens(50)).await.unwrap());

    // Act
    h.quotas.settle(&t, &rid("s1"), count(20), false).await.unwrap();
    h.quotas.settle(&t, &rid("s1"), count(20), false).await.unwrap();
    let young = h.quotas.take_records(Duration::from_secs(60));
    let kept = h.quotas.take_records(Duration::ZERO);

    // Assert: one record (the repeat charged nothing), the same as the stream's.
    assert!(young.is_empty());
    assert_eq!(kept.len(), 1);
    let mut from_stream = stream(&h, &t).await.remove(0);
    from_stream.entry = None;
    assert_eq!(kept[0], from_stream);
    h.quotas.give_back_records(kept);
    assert_eq!(h.quotas.records_waiting(), 1);
}

#[tokio::test]
async fn a_redis_without_the_tenants_counters_gets_them_from_the_ledger_before_its_snapshot() {
    // Arrange: a tenant that used 300 plan tokens and 20 of a grant, then Redis lost it all.
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let mut quota = plan(1000);
    quota.daily_requests = 5;
    quota.grants = vec![grant("gift", bonus(0), 100, None)];
    publish(&h, &t, &quota).await;
    wipe(&h).await;
    let restore = Restore {
        upto: 42,
        grant_used: BTreeMap::from([("gift".to_owned(), 20)]),
        plan_used: BTreeMap::from([("2030-03".to_owned(), 300), ("2030-02".to_owned(), 7)]),
        requests: BTreeMap::from([("2030-03-15".to_owned(), 4), ("2030-03-14".to_owned(), 9)]),
    };

    // Act
    let asked = h.quotas.publish_restoring(&t, &quota, None).await.unwrap();
    let unknown_meanwhile = h.quotas.reserve(&t, &rid("early"), tokens(1)).await;
    let restored = h.quotas.publish_restoring(&t, &quota, Some(&restore)).await.unwrap();
    let usage = h.quotas.usage(&t).await.unwrap();
    let last = h.quotas.reserve(&t, &rid("fifth"), tokens(1)).await.unwrap();
    let over = h.quotas.reserve(&t, &rid("sixth"), tokens(1)).await.unwrap();

    // Assert: no snapshot (so no admission) until the counters are back.
    assert_eq!(asked, Published::NeedsRestore);
    assert!(matches!(unknown_meanwhile, Err(QuotaError::UnknownTenant(_))), "{unknown_meanwhile:?}");
    assert_eq!(restored, Published::Done { written: true, version: 1 });
    assert_eq!((bucket(&usage, "plan").used, bucket(&usage, "gift").used), (300, 20));
    assert_eq!(usage.requests_today, 4);
    assert_eq!(usage.available, 700 + 80);
    reserved(last);
    assert_eq!(refused(over).dimension, Dimension::Requests);
    // The previous period's plan use is back too, with an expiry.
    let mut conn = raw_connection();
    let previous: Option<u64> =
        redis::cmd("HGET").arg(h.keys().quota_period("acme", "2030-02")).arg("plan_used").query(&mut conn).unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(h.keys().quota_period("acme", "2030-02")).query(&mut conn).unwrap();
    assert_eq!(previous, Some(7));
    assert!(ttl > 0, "the restored previous period expires (pttl {ttl})");
}

#[tokio::test]
async fn counters_written_before_there_was_a_ledger_are_adopted_not_overwritten() {
    // Arrange: counters without a generation (as a Redis from before the ledger holds them).
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("s1"), tokens(50)).await.unwrap());
    h.quotas.settle(&t, &rid("s1"), count(50), false).await.unwrap();
    let mut conn = raw_connection();
    redis::cmd("HDEL").arg(h.keys().quota_state("acme")).arg("gen").query::<()>(&mut conn).unwrap();
    let mut newer = plan(1000);
    newer.version = 2;

    // Act
    let published = h.quotas.publish_restoring(&t, &newer, None).await.unwrap();

    // Assert
    assert_eq!(published, Published::Done { written: true, version: 2 });
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").used, 50);
    let gen: Option<String> = redis::cmd("HGET").arg(h.keys().quota_state("acme")).arg("gen").query(&mut conn).unwrap();
    assert!(gen.is_some());
}

#[tokio::test]
async fn a_ledger_row_is_charged_once_and_only_to_counters_that_cannot_hold_it() {
    // Arrange: a settle counted in the first generation, then Redis lost everything and the
    // counters were restored from a ledger holding rows up to 10.
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let mut quota = plan(1000);
    quota.grants = vec![grant("gift", bonus(0), 100, None)];
    publish(&h, &t, &quota).await;
    reserved(h.quotas.reserve(&t, &rid("s1"), tokens(60)).await.unwrap());
    h.quotas.settle(&t, &rid("s1"), count(60), false).await.unwrap();
    let record = h.quotas.take_records(Duration::ZERO).remove(0);
    assert_eq!(record.charged, parts(&[("gift", 60)]));

    // Act / Assert: same generation: the counters hold it.
    assert_eq!(h.quotas.apply_usage(11, &record, true, false).await.unwrap(), Applied::Counted);
    wipe(&h).await;
    assert_eq!(h.quotas.apply_usage(11, &record, true, false).await.unwrap(), Applied::Missing);
    let restore = Restore { upto: 10, ..Restore::default() };
    h.quotas.publish_restoring(&t, &quota, Some(&restore)).await.unwrap();
    // A row the restore included is not charged again; one after it is, once.
    assert_eq!(h.quotas.apply_usage(9, &record, true, false).await.unwrap(), Applied::Counted);
    assert_eq!(h.quotas.apply_usage(11, &record, true, false).await.unwrap(), Applied::Applied);
    assert_eq!(h.quotas.apply_usage(11, &record, true, false).await.unwrap(), Applied::Counted);
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "gift").used, bucket(&usage, "plan").used, usage.requests_today), (60, 0, 1));
}

#[tokio::test]
async fn a_tenant_redis_lost_follows_its_fallback_policy_and_is_reported_missing_while_a_stranger_stays_unknown() {
    // Arrange: a fail_closed tenant the client learnt from Redis, a fail_open_limited one
    // only remembered from the control plane; then Redis loses every key.
    let h = harness(Clock::manual(noon()));
    let (closed, open) = (tenant("closed"), tenant("open"));
    publish(&h, &closed, &plan(1000)).await;
    reserved(h.quotas.reserve(&closed, &rid("before"), tokens(10)).await.unwrap());
    let allowance = tokens(50);
    h.quotas.remember(&open, 3, FallbackPolicy::FailOpenLimited { allowance });
    wipe(&h).await;

    // Act
    let refused = h.quotas.reserve(&closed, &rid("r1"), tokens(10)).await;
    let admitted = h.quotas.reserve(&open, &rid("r2"), tokens(10)).await.unwrap();
    let stranger = h.quotas.reserve(&tenant("nobody"), &rid("r3"), tokens(1)).await;
    let missing =
        tokio::time::timeout(Duration::from_secs(5), h.quotas.missing_meta()).await.expect("reported at once");

    // Assert: 503-like (not unknown) for the fail_closed tenant, a fallback admission for
    // the other; a tenant never seen is still unknown.
    assert!(matches!(refused, Err(QuotaError::Unavailable { .. })), "{refused:?}");
    assert_eq!(reserved(admitted).source, Source::Fallback);
    assert!(matches!(stranger, Err(QuotaError::UnknownTenant(_))), "{stranger:?}");
    let mut missing: Vec<String> = missing.iter().map(ToString::to_string).collect();
    missing.sort();
    assert_eq!(missing, vec!["closed".to_owned(), "open".to_owned()]);
}

#[tokio::test]
async fn what_a_process_admitted_while_redis_was_away_survives_its_restart_and_is_charged_when_redis_answers() {
    // Arrange: a process with a journal file admits and settles while Redis is unreachable
    // (a dead address), then stops; the next process opens the same file.
    let h = harness(Clock::manual(noon()));
    let t = tenant("open");
    let allowance = tokens(100);
    publish(&h, &t, &TenantQuota { fallback: FallbackPolicy::FailOpenLimited { allowance }, ..plan(1000) }).await;
    let dir = std::env::temp_dir().join(format!("tessera-journal-{}", h.keys().prefix()));
    let path = dir.join("quota-journal.log");
    let before = quotas_at("redis://127.0.0.1:1", h.keys().clone(), h.clock.clone());
    assert_eq!(before.open_journal(&path).unwrap().operations, 0);
    before.remember(&t, 1, FallbackPolicy::FailOpenLimited { allowance });
    reserved(before.reserve(&t, &rid("r1"), tokens(60)).await.unwrap());
    before.settle(&t, &rid("r1"), count(25), false).await.unwrap();
    reserved(before.reserve(&t, &rid("r2"), tokens(30)).await.unwrap());
    before.release(&t, &rid("r2")).await.unwrap();
    assert!(before.open_journal(&path).is_err(), "one process per journal file");
    drop(before);

    // Act: the next process, with Redis back.
    let mut after = None;
    for _ in 0..100 {
        // The stopped process's writer lets the file go as it winds down.
        let q = quotas_at(&redis_url(), h.keys().clone(), h.clock.clone());
        if let Ok(waiting) = q.open_journal(&path) {
            after = Some((q, waiting));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (after, waiting) = after.expect("the journal is free once its process stopped");
    let charged = after.flush_offline().await.unwrap();

    // Assert: both admissions came back from the file and were charged once.
    assert_eq!((waiting.operations, waiting.admitted_tokens), (2, 90));
    assert_eq!(charged, 2);
    assert_eq!(bucket(&after.usage(&t).await.unwrap(), "plan").used, 25);
    let records = stream(&h, &t).await;
    let outcomes: Vec<(&str, UsageOutcome)> = records.iter().map(|r| (r.request_id.as_str(), r.outcome)).collect();
    assert_eq!(outcomes, vec![("r1", UsageOutcome::Settled), ("r2", UsageOutcome::Released)]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "an empty journal leaves an empty file");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn within_a_reservations_ttl_after_a_restore_a_settle_with_no_trace_is_charged_late_and_after_it_is_unknown() {
    // Arrange: counters restored from a ledger with rows (Redis had lost them).
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    let quota = plan(1000);
    let restore = Restore { upto: 7, ..Restore::default() };
    assert_eq!(
        h.quotas.publish_restoring(&t, &quota, Some(&restore)).await.unwrap(),
        Published::Done { written: true, version: 1 }
    );

    // Act: a settle of a reservation the loss took, once and again; then one after the TTL.
    let lost = h.quotas.settle(&t, &rid("lost"), count(7), false).await.unwrap();
    let again = h.quotas.settle(&t, &rid("lost"), count(7), false).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(61));
    let stranger = h.quotas.settle(&t, &rid("made-up"), count(50), false).await.unwrap();

    // Assert: charged once from its body; a made-up id long after the restore charges nothing.
    let plan7 = parts(&[("plan", 7)]);
    assert_eq!(
        lost,
        SettleOutcome::Settled {
            reserved: 0,
            actual: 7,
            overdraft: 7,
            charged: plan7.clone(),
            late: true,
            source: Source::Redis
        }
    );
    assert_eq!(again, SettleOutcome::AlreadySettled { reserved: 0, actual: 7, charged: plan7 });
    assert_eq!(stranger, SettleOutcome::Unknown);
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").used, 7);
}

#[tokio::test]
async fn an_instances_own_record_is_charged_when_the_counters_lost_it_in_the_same_generation() {
    // Arrange: a settle, then the counters lose it without a restore (an append-only
    // file's last second: the done marker and the use are gone, the generation stays).
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("s1"), tokens(60)).await.unwrap());
    h.quotas.settle(&t, &rid("s1"), count(40), false).await.unwrap();
    let record = h.quotas.take_records(Duration::ZERO).remove(0);
    let kept_by_redis = h.quotas.apply_usage(5, &record, false, true).await.unwrap();
    let mut conn = raw_connection();
    let period = h.keys().quota_period("acme", "2030-03");
    let marker = super::marker_key(&h, "acme", "s1", noon(), 3_600_000).expect("the marker's window");
    redis::cmd("HDEL").arg(marker).arg("s1").query::<()>(&mut conn).unwrap();
    redis::cmd("HINCRBY").arg(&period).arg("plan_used").arg(-40).query::<()>(&mut conn).unwrap();

    // Act: from the stream (same generation: trusted), then from the instance (checked).
    let from_stream = h.quotas.apply_usage(5, &record, false, false).await.unwrap();
    let from_instance = h.quotas.apply_usage(5, &record, false, true).await.unwrap();
    let again = h.quotas.apply_usage(5, &record, false, true).await.unwrap();

    // Assert
    assert_eq!(
        (kept_by_redis, from_stream, from_instance, again),
        (Applied::Counted, Applied::Counted, Applied::Applied, Applied::Counted)
    );
    assert_eq!(bucket(&h.quotas.usage(&t).await.unwrap(), "plan").used, 40);
}

#[tokio::test]
async fn an_instances_own_record_older_than_a_done_marker_lives_is_never_charged_again() {
    // Arrange: a settle, its record kept by the instance (the ledger never confirmed it),
    // and two idempotency windows (an hour each) passing: the done marker is gone.
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    reserved(h.quotas.reserve(&t, &rid("s1"), tokens(60)).await.unwrap());
    h.quotas.settle(&t, &rid("s1"), count(40), false).await.unwrap();
    let record = h.quotas.take_records(Duration::ZERO).remove(0);
    let march = h.keys().quota_period("acme", "2030-03");
    let mut conn = raw_connection();
    let marker = super::marker_key(&h, "acme", "s1", noon(), 3_600_000).expect("the marker's window");
    let expires_at: i64 = redis::cmd("PEXPIRETIME").arg(&marker).query(&mut conn).unwrap();
    h.clock.set(noon() + chrono::Duration::hours(2));

    // Act
    let applied = h.quotas.apply_usage(5, &record, false, true).await.unwrap();

    // Assert: counted by this copy of the counters (same generation) long ago.
    assert_eq!(
        expires_at,
        (noon() + chrono::Duration::hours(2)).timestamp_millis(),
        "the marker's hash lives to the end of the window after its own"
    );
    assert_eq!(applied, Applied::Counted);
    let used: i64 = redis::cmd("HGET").arg(&march).arg("plan_used").query(&mut conn).unwrap();
    assert_eq!(used, 40, "March was charged once");
}

#[tokio::test]
async fn the_streams_of_several_tenants_are_read_acknowledged_and_their_generations_known_in_one_call() {
    // Arrange: three tenants (on a cluster their keys lie in different slots), one settle
    // each
    let h = harness(Clock::manual(noon()));
    let tenants = [tenant("acme"), tenant("globex"), tenant("initech")];
    for t in &tenants {
        publish(&h, t, &plan(1000)).await;
        reserved(h.quotas.reserve(t, &rid("r1"), tokens(10)).await.unwrap());
        h.quotas.settle(t, &rid("r1"), count(7), false).await.unwrap();
    }

    // Act
    let records = h.quotas.read_usage(&tenants, 100).await.unwrap();
    let generations = h.quotas.generations(&tenants).await.unwrap();
    h.quotas.ack_usage(&records).await.unwrap();

    // Assert: one record per tenant, each tenant's generation, nothing left after the ack
    let read: Vec<(&str, Option<u64>)> = records.iter().map(|r| (r.tenant.as_str(), r.actual)).collect();
    assert_eq!(read, [("acme", Some(7)), ("globex", Some(7)), ("initech", Some(7))]);
    assert!(tenants.iter().all(|t| generations[t].is_some()), "{generations:?}");
    assert!(h.quotas.read_usage(&tenants, 100).await.unwrap().is_empty());
}
