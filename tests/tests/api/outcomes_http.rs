//! Outcome reports over HTTP (`POST /api/v1/channels/{code}/outcomes`) against a running
//! server with its own database and Redis key prefix: counted in Redis where the health
//! evaluation reads them, refused by field, 404 for an unknown channel, 503 without Redis,
//! and recorded without looking the channel up while Postgres is away.

use integration::{base_settings, postgres_address, spawn_app, spawn_app_with, TestApp};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use testproxy::{through, Proxy};

use client::health::{ChannelCode, MinuteCounts, Totals};

async fn report(app: &TestApp, code: &str, body: Value) -> (u16, Value) {
    app.post_json(&format!("/api/v1/channels/{code}/outcomes"), body).await
}

async fn register_channel(app: &TestApp, code: &str) {
    sqlx::query("insert into channel (code, name, base_weight) values ($1, $2, 10)")
        .bind(code)
        .bind(format!("channel {code}"))
        .execute(&app.state.db)
        .await
        .unwrap();
}

fn channel(code: &str) -> ChannelCode {
    ChannelCode::parse(code).unwrap()
}

#[tokio::test]
async fn a_report_is_accepted_and_counted_in_the_minute_it_names() {
    // Arrange
    let app = spawn_app().await;
    register_channel(&app, "ALIPAY_A").await;
    let a = channel("ALIPAY_A");

    // Act
    let (first_status, first) =
        report(&app, "ALIPAY_A", json!({"ok": 7, "fail": 2, "latency_ms_sum": 900, "latency_count": 9})).await;
    let (second_status, second) = report(&app, "ALIPAY_A", json!({"ok": 0, "fail": 1})).await;

    // Assert
    assert_eq!((first_status, second_status), (202, 202), "{first} {second}");
    assert_eq!(first["channel"], "ALIPAY_A");
    let (m1, m2) = (first["minute"].as_i64().unwrap(), second["minute"].as_i64().unwrap());
    let window = app.state.outcomes.window(&a, m1, m2).await.unwrap();
    assert_eq!(Totals::of(&window), Totals { ok: 7, fail: 3, latency_ms_sum: 900, latency_count: 9 });
    if m1 == m2 {
        assert_eq!(window, vec![MinuteCounts { minute: m1, ok: 7, fail: 3, latency_ms_sum: 900, latency_count: 9 }]);
    }
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"tessera_health_outcomes_total{result="fail"} 3"#), "{metrics}");
    // Per channel too: its calls by result, and its latencies' sum and count.
    for series in [
        r#"tessera_channel_outcomes_total{channel="ALIPAY_A",result="ok"} 7"#,
        r#"tessera_channel_outcomes_total{channel="ALIPAY_A",result="fail"} 3"#,
        r#"tessera_channel_latency_ms_total{channel="ALIPAY_A"} 900"#,
        r#"tessera_channel_latency_samples_total{channel="ALIPAY_A"} 9"#,
    ] {
        assert!(metrics.contains(series), "{series}:\n{metrics}");
    }
}

#[tokio::test]
async fn latencies_reported_one_by_one_fill_the_channel_histogram_and_the_sum() {
    // Arrange
    let app = spawn_app().await;
    register_channel(&app, "ALIPAY_A").await;

    // Act: four latencies one by one, and two more as a sum, in one report of six calls
    let (status, reply) = report(
        &app,
        "ALIPAY_A",
        json!({"ok": 5, "fail": 1, "latency_ms_sum": 100, "latency_count": 2, "latencies_ms": [3, 40, 700, 1200]}),
    )
    .await;

    // Assert: the window holds all six latencies; the histogram the four listed
    assert_eq!(status, 202, "{reply}");
    let window = app.state.outcomes.window(&channel("ALIPAY_A"), i64::MIN, i64::MAX).await.unwrap();
    assert_eq!(Totals::of(&window), Totals { ok: 5, fail: 1, latency_ms_sum: 2043, latency_count: 6 });
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for series in [
        r#"tessera_channel_latency_ms_total{channel="ALIPAY_A"} 2043"#,
        r#"tessera_channel_latency_samples_total{channel="ALIPAY_A"} 6"#,
        r#"tessera_channel_latency_seconds_bucket{channel="ALIPAY_A",le="0.005"} 1"#,
        r#"tessera_channel_latency_seconds_bucket{channel="ALIPAY_A",le="0.025"} 1"#,
        r#"tessera_channel_latency_seconds_bucket{channel="ALIPAY_A",le="0.05"} 2"#,
        r#"tessera_channel_latency_seconds_bucket{channel="ALIPAY_A",le="1"} 3"#,
        r#"tessera_channel_latency_seconds_bucket{channel="ALIPAY_A",le="2.5"} 4"#,
        r#"tessera_channel_latency_seconds_sum{channel="ALIPAY_A"} 1.943"#,
        r#"tessera_channel_latency_seconds_count{channel="ALIPAY_A"} 4"#,
    ] {
        assert!(metrics.contains(series), "{series}:\n{metrics}");
    }
}

#[tokio::test]
async fn a_report_for_a_channel_with_no_row_is_404_and_writes_nothing() {
    // Arrange
    let app = spawn_app().await;
    register_channel(&app, "ALIPAY_A").await;

    // Act
    let (status, body) = report(&app, "NOT_A_CHANNEL", json!({"ok": 1, "fail": 0})).await;

    // Assert
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("NOT_A_CHANNEL"), "{body}");
    let window = app.state.outcomes.window(&channel("NOT_A_CHANNEL"), i64::MIN, i64::MAX).await.unwrap();
    assert!(window.is_empty(), "{window:?}");
    // Nor a metric series: labels come from the configured channels, never from a caller.
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("NOT_A_CHANNEL"), "{metrics}");
}

#[tokio::test]
async fn bad_reports_are_400_naming_the_field_and_write_nothing() {
    // Arrange
    let app = spawn_app().await;
    register_channel(&app, "ALIPAY_A").await;
    let cases = [
        ("ALIPAY_A", json!({"ok": 0, "fail": 0}), "ok"),
        ("ALIPAY_A", json!({"fail": 1}), "ok"),
        ("ALIPAY_A", json!({"ok": 1}), "fail"),
        ("ALIPAY_A", json!({"ok": -1, "fail": 1}), "ok"),
        ("ALIPAY_A", json!({"ok": 1, "fail": 1.5}), "fail"),
        ("ALIPAY_A", json!({"ok": 1, "fail": "2"}), "fail"),
        ("ALIPAY_A", json!({"ok": 1_000_000_001u64, "fail": 0}), "ok"),
        // One report counts at most 10,000 calls a field: a billion failures in one report
        // would hold the channel failing for a whole window.
        ("ALIPAY_A", json!({"ok": 10_001, "fail": 0}), "ok"),
        ("ALIPAY_A", json!({"ok": 0, "fail": 1_000_000_000u64}), "fail"),
        ("ALIPAY_A", json!({"ok": 1, "fail": 10_001}), "fail"),
        ("ALIPAY_A", json!({"ok": 1, "fail": 1, "latency_ms_sum": 50, "latency_count": 3}), "latency_count"),
        ("ALIPAY_A", json!({"ok": 1, "fail": 1, "latency_ms_sum": 50}), "latency_count"),
        (
            "ALIPAY_A",
            json!({"ok": 1, "fail": 0, "latency_ms_sum": 2_000_000_000u64, "latency_count": 1}),
            "latency_ms_sum",
        ),
        ("ALIPAY_A", json!({"ok": 1, "fail": 0, "latncy_count": 1}), "latncy_count"),
        // Latencies one by one: a list of whole ms up to an hour, no more than the calls.
        ("ALIPAY_A", json!({"ok": 1, "fail": 0, "latencies_ms": 30}), "latencies_ms"),
        ("ALIPAY_A", json!({"ok": 2, "fail": 0, "latencies_ms": [30, 3_600_001]}), "latencies_ms[1]"),
        ("ALIPAY_A", json!({"ok": 2, "fail": 0, "latencies_ms": [1.5]}), "latencies_ms[0]"),
        ("ALIPAY_A", json!({"ok": 2, "fail": 0, "latencies_ms": [-1]}), "latencies_ms[0]"),
        ("ALIPAY_A", json!({"ok": 1, "fail": 0, "latencies_ms": [5, 6]}), "latencies_ms"),
        (
            "ALIPAY_A",
            json!({"ok": 2, "fail": 0, "latency_ms_sum": 5, "latency_count": 1, "latencies_ms": [5, 6]}),
            "latencies_ms",
        ),
        ("ALIPAY_A", json!({"ok": 10_000, "fail": 10_000, "latencies_ms": vec![1; 10_001]}), "latencies_ms"),
        (
            "ALIPAY_A",
            json!({"ok": 10_000, "fail": 10_000, "latency_count": 10_000, "latencies_ms": [1]}),
            "latencies_ms",
        ),
        (
            "ALIPAY_A",
            json!({"ok": 10_000, "fail": 10_000, "latency_count": 20_000, "latencies_ms": [1]}),
            "latency_count",
        ),
        ("ALIPAY_A", json!({"ok": 0, "fail": 0, "latencies_ms": [5]}), "ok"),
        // Sums past u64 must not wrap (nor panic): each field is bounded first.
        ("ALIPAY_A", json!({"ok": 10, "fail": 0, "latency_ms_sum": u64::MAX, "latencies_ms": [1]}), "latency_ms_sum"),
        ("ALIPAY_A", json!({"ok": u64::MAX, "fail": 1, "latencies_ms": [0]}), "ok"),
        (
            "ALIPAY_A",
            json!({"ok": 2, "fail": 0, "latency_ms_sum": 999_999_999u64, "latency_count": 1, "latencies_ms": [2]}),
            "latencies_ms",
        ),
        ("ALIPAY_A", json!([1, 0]), "body"),
        ("ALIPAY:A", json!({"ok": 1, "fail": 0}), "channel"),
    ];

    for (code, body, field) in cases {
        // Act
        let (status, answer) = report(&app, code, body.clone()).await;

        // Assert
        assert_eq!((status, answer["field"].as_str()), (400, Some(field)), "{code} {body}: {answer}");
        assert!(!answer["rule"].as_str().unwrap_or_default().is_empty(), "{answer}");
    }
    // A body over the raw-body limit (256 KiB): a JSON 413 naming the body, as every API error.
    let huge = json!({"ok": 1, "fail": 0, "latencies_ms": vec![[0u8; 8]; 40_000]});
    let (status, answer) = report(&app, "ALIPAY_A", huge).await;
    assert_eq!((status, answer["field"].as_str()), (413, Some("body")), "{answer}");
    let window = app.state.outcomes.window(&channel("ALIPAY_A"), i64::MIN, i64::MAX).await.unwrap();
    assert!(window.is_empty(), "{window:?}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("tessera_channel_latency_seconds_count"), "{metrics}");
}

#[tokio::test]
async fn without_redis_a_report_is_503() {
    // Arrange
    let app = spawn_app_with(|s| integration::use_redis(s, "redis://127.0.0.1:1")).await;
    register_channel(&app, "ALIPAY_A").await;

    // Act
    let (status, body) = report(&app, "ALIPAY_A", json!({"ok": 1, "fail": 0})).await;

    // Assert
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("redis unreachable"), "{body}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"tessera_health_reports_dropped_total{reason="unreachable"} 1"#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_away_a_report_is_recorded_without_looking_the_channel_up() {
    // Arrange: an app whose Postgres connections go through a proxy the test cuts
    let proxy = Proxy::start(postgres_address(base_settings().database_url.expose_secret())).await;
    let app = spawn_app_with(|s| s.database_url = through(s.database_url.expose_secret(), proxy.addr()).into()).await;
    register_channel(&app, "ALIPAY_A").await;

    // Act
    proxy.cut().await;
    let (status, body) = report(&app, "ALIPAY_A", json!({"ok": 2, "fail": 1})).await;

    // Assert
    assert_eq!(status, 202, "{body}");
    let minute = body["minute"].as_i64().unwrap();
    let window = app.state.outcomes.window(&channel("ALIPAY_A"), minute, minute).await.unwrap();
    assert_eq!((Totals::of(&window).ok, Totals::of(&window).fail), (2, 1));
    // Unlooked-up, it adds no per-channel series (a made-up code would add one each).
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("tessera_channel_outcomes_total{"), "{metrics}");
}
