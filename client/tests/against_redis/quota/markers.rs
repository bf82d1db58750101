//! Done markers kept for the tenant's idempotency window only, in compact per-window
//! hashes (`lua/quota_lib.lua`, "Done markers"): what a repeated call finds, for how long,
//! and what they cost in Redis memory.

use super::*;

const HOUR_MS: i64 = 3_600_000;

/// A request id shaped like the UUIDs clients send (36 characters), the `i`-th of a run.
fn uuid_like(i: u64) -> String {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        x >> 32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        (x >> 20) & 0xfff,
        i.wrapping_mul(0x2545_F491_4F6C_DD1D) & 0xffff_ffff_ffff
    )
}

/// Reserves and settles `n` requests named by `name(i)`, `from` onwards.
async fn finish(h: &Harness, t: &TenantId, from: u64, n: u64, name: impl Fn(u64) -> String) {
    for i in from..from + n {
        let id = rid(&name(i));
        reserved(h.quotas.reserve(t, &id, tokens(10)).await.unwrap());
        assert!(matches!(h.quotas.settle(t, &id, count(7), false).await.unwrap(), SettleOutcome::Settled { .. }));
    }
}

/// The bucket hashes of the window holding `at`, from the state hash's record of it.
fn window_keys(h: &Harness, tenant: &str, at: DateTime<Utc>, window_ms: i64) -> Vec<String> {
    window_buckets(h, tenant, at, window_ms).unwrap_or_default()
}

/// Redis's bytes for `keys` (`MEMORY USAGE`, every element sampled) and their fields.
fn bytes_and_fields(keys: &[String]) -> (u64, u64) {
    let mut conn = raw_connection();
    let mut bytes = 0;
    let mut fields = 0;
    for key in keys {
        let used: Option<u64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query(&mut conn).unwrap();
        bytes += used.unwrap_or(0);
        fields += redis::cmd("HLEN").arg(key).query::<u64>(&mut conn).unwrap();
    }
    (bytes, fields)
}

#[tokio::test]
async fn a_finished_request_is_answered_by_redis_for_its_window_and_forgotten_two_windows_on() {
    // Arrange: a settle, a release and an expiry at noon (windows of an hour: 12:00-13:00)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    for r in ["settled", "released", "expired"] {
        reserved(h.quotas.reserve(&t, &rid(r), tokens(40)).await.unwrap());
    }
    h.quotas.settle(&t, &rid("settled"), count(25), false).await.unwrap();
    h.quotas.release(&t, &rid("released")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(61));
    assert_eq!(h.quotas.sweep(&t, 100).await.unwrap().released, 1);
    let before = h.quotas.usage(&t).await.unwrap();

    // Act: the same calls again in the next window (13:59:59), then in the one after (14:00)
    h.clock.set(noon() + chrono::Duration::milliseconds(2 * HOUR_MS - 1000));
    let settle_again = h.quotas.settle(&t, &rid("settled"), count(99), false).await.unwrap();
    let release_again = h.quotas.release(&t, &rid("released")).await.unwrap();
    let reserve_again = reserved(h.quotas.reserve(&t, &rid("settled"), tokens(40)).await.unwrap());
    let expired_again = reserved(h.quotas.reserve(&t, &rid("expired"), tokens(40)).await.unwrap());
    let within = h.quotas.usage(&t).await.unwrap();
    h.clock.set(noon() + chrono::Duration::milliseconds(2 * HOUR_MS));
    let settle_after = h.quotas.settle(&t, &rid("settled"), count(99), false).await.unwrap();
    let release_after = h.quotas.release(&t, &rid("released")).await.unwrap();

    // Assert: within the window after its own, every marker answers and nothing changes
    let plan25 = parts(&[("plan", 25)]);
    assert_eq!(settle_again, SettleOutcome::AlreadySettled { reserved: 40, actual: 25, charged: plan25.clone() });
    assert_eq!(release_again, ReleaseOutcome::AlreadyReleased { reserved: 40 });
    assert_eq!(
        (reserve_again.replayed, reserve_again.state, reserve_again.tokens),
        (true, ReservationState::Settled, 40)
    );
    assert_eq!(reserve_again.parts, parts(&[("plan", 40)]));
    assert_eq!(reserve_again.deadline_ms, noon().timestamp_millis() + 60_000);
    assert_eq!((expired_again.replayed, expired_again.state), (true, ReservationState::Expired));
    assert_eq!((within.requests_today, bucket(&within, "plan").used), (before.requests_today, 25));
    // Two windows on, Redis no longer knows them (the server then asks the usage ledger).
    assert_eq!((settle_after, release_after), (SettleOutcome::Unknown, ReleaseOutcome::Unknown));
}

#[tokio::test]
async fn a_tenants_own_window_sets_how_long_its_markers_answer() {
    // Arrange: a one-minute window
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &TenantQuota { idempotency_window: Duration::from_secs(60), ..plan(1000) }).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(40)).await.unwrap());
    h.quotas.release(&t, &rid("r1")).await.unwrap();
    let marker = marker_key(&h, "acme", "r1", noon(), 60_000).expect("the marker's window");
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(&marker).query(&mut raw_connection()).unwrap();

    // Act
    h.clock.set(noon() + chrono::Duration::seconds(119));
    let within = h.quotas.release(&t, &rid("r1")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::seconds(120));
    let after = h.quotas.release(&t, &rid("r1")).await.unwrap();

    // Assert
    assert_eq!(expires, noon().timestamp_millis() + 120_000);
    assert_eq!(within, ReleaseOutcome::AlreadyReleased { reserved: 40 });
    assert_eq!(after, ReleaseOutcome::Unknown);
}

#[test]
fn a_window_is_valid_only_within_a_minute_and_400_days() {
    for (window, ok) in [(59, false), (60, true), (400 * 86_400, true), (400 * 86_400 + 1, false)] {
        let quota = TenantQuota { idempotency_window: Duration::from_secs(window), ..plan(1000) };
        match quota.validate() {
            Ok(()) => assert!(ok, "{window} s is valid"),
            Err(e) => {
                assert!(!ok, "{window} s was refused: {e}");
                assert_eq!(e.field, "idempotency_window_ms", "{e}");
            }
        }
    }
}

#[tokio::test]
async fn markers_cost_at_most_64_bytes_per_finished_request_and_only_two_windows_are_kept() {
    // Arrange: 1,000 finished requests (UUID-shaped ids) in each of four hourly windows
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000_000)).await;
    let mut per_window = Vec::new();

    // Act
    for w in 0..4 {
        let at = noon() + chrono::Duration::hours(w);
        h.clock.set(at);
        finish(&h, &t, w as u64 * 1000, 1000, uuid_like).await;
        let keys = window_keys(&h, "acme", at, HOUR_MS);
        let (bytes, fields) = bytes_and_fields(&keys);
        per_window.push((keys, bytes, fields));
        // Requests of the first window, one from each layout it grew to (1 bucket for the
        // first 128 markers, 4 up to 512, then 16): answered in the window after it, not in
        // the next.
        for i in [5, 300, 900] {
            let again = h.quotas.settle(&t, &rid(&uuid_like(i)), count(1), false).await.unwrap();
            match w {
                0 | 1 => assert!(
                    matches!(again, SettleOutcome::AlreadySettled { reserved: 10, actual: 7, .. }),
                    "window {w}, request {i}: {again:?}"
                ),
                _ => assert_eq!(again, SettleOutcome::Unknown, "window {w}, request {i}"),
            }
        }
    }

    // Assert: every marker is there, each window's hashes expire when the next window ends,
    // and a marker costs <= 64 bytes in every window: the first (sized for none) grew its
    // buckets as it filled, the others were sized by the one before.
    let mut conn = raw_connection();
    for (w, (keys, bytes, fields)) in per_window.iter().enumerate() {
        assert_eq!(*fields, 1000, "window {w}");
        let end = (noon() + chrono::Duration::hours(w as i64 + 2)).timestamp_millis();
        for key in keys {
            let expires: i64 = redis::cmd("PEXPIRETIME").arg(key).query(&mut conn).unwrap();
            assert_eq!(expires, end, "window {w}: {key}");
        }
        assert!(bytes / fields <= 64, "window {w}: {bytes} bytes for {fields} markers");
        // 1 + 4 + 16 buckets for the first window, 16 for the others (1,000 markers each).
        assert_eq!(keys.len(), if w == 0 { 21 } else { 16 }, "window {w}");
    }
    // The state hash keeps the record of the last two windows only.
    let fields: Vec<String> = redis::cmd("HKEYS").arg(h.keys().quota_state("acme")).query(&mut conn).unwrap();
    let mut windows: Vec<&str> =
        fields.iter().map(String::as_str).filter(|f| f.starts_with("wc_") || f.starts_with("wp_")).collect();
    windows.sort();
    assert_eq!(windows, ["wc_b", "wc_k", "wc_len", "wc_n", "wc_start", "wp_b", "wp_k", "wp_len", "wp_start"]);
    let starts: (i64, i64) =
        redis::cmd("HMGET").arg(h.keys().quota_state("acme")).arg("wc_start").arg("wp_start").query(&mut conn).unwrap();
    let hour = |w: i64| (noon() + chrono::Duration::hours(w)).timestamp_millis();
    assert_eq!(starts, (hour(3), hour(2)));
}

#[tokio::test]
async fn counters_from_before_windows_honour_their_old_markers_for_an_old_markers_life() {
    // Arrange: a tenant whose counters predate windowed markers, with a marker of the old
    // kind (a key of its own)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let mut conn = raw_connection();
    redis::cmd("HDEL").arg(h.keys().quota_state("acme")).arg("legacy_until").query::<()>(&mut conn).unwrap();
    let deadline = noon().timestamp_millis() + 60_000;
    redis::cmd("SET")
        .arg(format!("{}old", h.keys().quota_done("acme")))
        .arg(format!("released|40|{deadline}|plan:40||"))
        .query::<()>(&mut conn)
        .unwrap();

    // Act: a new request writes the first windowed marker; then the old one is asked for,
    // within the retention (30 days) and after it
    reserved(h.quotas.reserve(&t, &rid("new"), tokens(10)).await.unwrap());
    h.quotas.release(&t, &rid("new")).await.unwrap();
    let until: i64 = redis::cmd("HGET").arg(h.keys().quota_state("acme")).arg("legacy_until").query(&mut conn).unwrap();
    h.clock.set(noon() + chrono::Duration::days(29));
    let within = h.quotas.release(&t, &rid("old")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::days(30));
    let after = h.quotas.release(&t, &rid("old")).await.unwrap();

    // Assert
    assert_eq!(until, (noon() + chrono::Duration::days(30)).timestamp_millis());
    assert_eq!(within, ReleaseOutcome::AlreadyReleased { reserved: 40 });
    assert_eq!(after, ReleaseOutcome::Unknown);
}

#[tokio::test]
async fn a_changed_window_takes_effect_when_the_current_window_ends_and_old_markers_stay_found() {
    // Arrange: a marker in an hour's window, then the window cut to a minute
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1000)).await;
    let finish_one = |name: &'static str| {
        let (h, t) = (&h, &t);
        async move {
            reserved(h.quotas.reserve(t, &rid(name), tokens(10)).await.unwrap());
            h.quotas.release(t, &rid(name)).await.unwrap();
        }
    };
    h.clock.set(noon() + chrono::Duration::minutes(10));
    finish_one("r1").await;
    let minute = TenantQuota { version: 2, idempotency_window: Duration::from_secs(60), ..plan(1000) };
    publish(&h, &t, &minute).await;

    // Act: markers written in the hour's window after the change, then in minute windows
    h.clock.set(noon() + chrono::Duration::minutes(20));
    finish_one("r2").await;
    let r1_same_hour = h.quotas.release(&t, &rid("r1")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::minutes(60) + chrono::Duration::seconds(5));
    finish_one("r3").await;
    let r1_next_window = h.quotas.release(&t, &rid("r1")).await.unwrap();
    h.clock.set(noon() + chrono::Duration::minutes(61) + chrono::Duration::seconds(5));
    finish_one("r4").await;
    let r1_after = h.quotas.release(&t, &rid("r1")).await.unwrap();
    let r3_after = h.quotas.release(&t, &rid("r3")).await.unwrap();

    // Assert: the hour's markers answer while its window is one of the two kept, then the
    // minute's rule holds
    let released = ReleaseOutcome::AlreadyReleased { reserved: 10 };
    assert_eq!((r1_same_hour, r1_next_window), (released.clone(), released.clone()));
    assert_eq!((r1_after, r3_after), (ReleaseOutcome::Unknown, released));
    let minute_start = (noon() + chrono::Duration::minutes(61)).timestamp_millis();
    let (start, len): (i64, i64) = redis::cmd("HMGET")
        .arg(h.keys().quota_state("acme"))
        .arg("wc_start")
        .arg("wc_len")
        .query(&mut raw_connection())
        .unwrap();
    assert_eq!((start, len), (minute_start, 60_000));
}

/// The state hash's number `field` of `tenant`.
fn state_number(h: &Harness, tenant: &str, field: &str) -> Option<i64> {
    redis::cmd("HGET").arg(h.keys().quota_state(tenant)).arg(field).query(&mut raw_connection()).unwrap()
}

#[tokio::test]
async fn a_window_moved_on_by_a_build_from_before_layouts_keeps_every_marker_found() {
    // Arrange: 600 finished requests at noon grow the window to its third layout (1, 4, 16
    // buckets); then a build from before layouts moves the windows on at 13:00 (here to a
    // window of one bucket) without touching the layout records (wc_k, wp_k), as it does.
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000_000)).await;
    finish(&h, &t, 0, 600, uuid_like).await;
    let (noon_ms, one_ms) = (noon().timestamp_millis(), noon().timestamp_millis() + HOUR_MS);
    assert_eq!(state_number(&h, "acme", "wc_k"), Some(noon_ms * 16 + 2));
    let state = h.keys().quota_state("acme");
    let () = redis::cmd("HSET")
        .arg(&state)
        .arg(&["wp_start", &noon_ms.to_string(), "wp_len", "3600000", "wp_b", "1"])
        .arg(&["wc_start", &one_ms.to_string(), "wc_len", "3600000", "wc_b", "1", "wc_n", "0"])
        .query(&mut raw_connection())
        .unwrap();

    // Act: at 13:00, retries of noon's requests from every layout, new requests enough to
    // grow the new window, and the retries again.
    h.clock.set(noon() + chrono::Duration::hours(1));
    let settle_again = |i: u64| {
        let (quotas, t) = (h.quotas.clone(), t.clone());
        async move { quotas.settle(&t, &rid(&uuid_like(i)), count(1), false).await.unwrap() }
    };
    let mut before_growth = Vec::new();
    for i in [5, 300, 590] {
        before_growth.push(settle_again(i).await);
    }
    finish(&h, &t, 1000, 1, uuid_like).await;
    let first_new_key = marker_key(&h, "acme", &uuid_like(1000), noon() + chrono::Duration::hours(1), HOUR_MS);
    finish(&h, &t, 1001, 200, uuid_like).await;
    let mut after_growth = Vec::new();
    for i in [5, 300, 590, 1000, 1150] {
        after_growth.push(settle_again(i).await);
    }

    // Assert: noon's window keeps its third layout (now named by wp_k), 13:00's starts at
    // layout 0 and grows to its own; every marker answers.
    let done = h.keys().quota_done("acme");
    let gen: String = redis::cmd("HGET").arg(&state).arg("gen").query(&mut raw_connection()).unwrap();
    assert_eq!(first_new_key, Some(format!("{done}#{gen}#{one_ms}#0")));
    assert_eq!(
        (state_number(&h, "acme", "wc_k"), state_number(&h, "acme", "wp_k")),
        (Some(one_ms * 16 + 1), Some(noon_ms * 16 + 2))
    );
    for (i, again) in before_growth.iter().chain(&after_growth).enumerate() {
        assert!(matches!(again, SettleOutcome::AlreadySettled { reserved: 10, actual: 7, .. }), "{i}: {again:?}");
    }

    // And this build moving the windows on at 14:00: 13:00's grown layout stays found
    // (its record moves to wp_k), noon's window is forgotten.
    h.clock.set(noon() + chrono::Duration::hours(2));
    finish(&h, &t, 2000, 1, uuid_like).await;
    assert_eq!(state_number(&h, "acme", "wp_k"), Some(one_ms * 16 + 1));
    for i in [1000, 1150] {
        let again = settle_again(i).await;
        assert!(matches!(again, SettleOutcome::AlreadySettled { reserved: 10, actual: 7, .. }), "{i}: {again:?}");
    }
    assert_eq!(settle_again(590).await, SettleOutcome::Unknown);
}

#[tokio::test]
async fn a_window_written_before_layouts_grows_to_the_layout_its_count_needs_in_one_step() {
    // Arrange: a window of one bucket already holding 5,000 markers by its count (as a build
    // from before layouts leaves it)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000_000_000)).await;
    finish(&h, &t, 0, 1, uuid_like).await;
    let () = redis::cmd("HSET")
        .arg(h.keys().quota_state("acme"))
        .arg("wc_n")
        .arg(5000)
        .query(&mut raw_connection())
        .unwrap();

    // Act
    finish(&h, &t, 1, 1, uuid_like).await;

    // Assert: layout 3 (64 buckets: 5,001 <= 2 * 64 * 64), not one layout per marker
    assert_eq!(state_number(&h, "acme", "wc_k"), Some(noon().timestamp_millis() * 16 + 3));
    let again = h.quotas.settle(&t, &rid(&uuid_like(0)), count(1), false).await.unwrap();
    assert!(matches!(again, SettleOutcome::AlreadySettled { .. }), "{again:?}");
}
