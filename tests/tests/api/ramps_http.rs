//! Ramps against real Postgres and Redis: started over HTTP, evaluated by the `ramp_guard`
//! job's `run_once` at hand-set instants (the test holds the job's leadership, so the
//! scheduled job never runs beside it), outcomes recorded under a hand-set clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use integration::{hold_jobs, spawn_app_with, HeldJobs, TestApp};
use serde_json::{json, Value};

struct Bench {
    app: TestApp,
    _jobs: HeldJobs,
    clock: client::Clock,
    outcomes: client::Outcomes,
    /// The instant the test's offsets count from: set when a ramp starts or is promoted.
    t0: std::cell::Cell<DateTime<Utc>>,
}

impl Bench {
    fn at(&self, seconds: i64) -> DateTime<Utc> {
        self.t0.get() + Duration::seconds(seconds)
    }

    /// Offsets count from now on (after a write the server stamped with its own clock).
    fn rebase(&self) {
        self.t0.set(Utc::now());
    }
}

async fn bench_with(customise: impl FnOnce(&mut server::configuration::Settings)) -> Bench {
    let app = spawn_app_with(customise).await;
    let jobs = hold_jobs(&app, &["ramp_guard", "notify"]).await;
    let t0 = Utc::now();
    let clock = client::Clock::manual(t0);
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), None);
    let b = Bench { app, _jobs: jobs, clock, outcomes, t0: std::cell::Cell::new(t0) };
    for code in ["A", "B", "C"] {
        let (status, reply) =
            b.app.post_json("/api/v1/channels", json!({"code": code, "name": code, "base_weight": 1})).await;
        assert_eq!(status, 201, "{reply}");
    }
    let (status, reply) = b
        .app
        .send(
            reqwest::Method::PUT,
            "/api/v1/pools/p",
            None,
            json!({
                "snapshot": {"kind": "channels", "ordering": "smooth", "batch_size": 100, "low_water": 10,
                             "timezone": "UTC", "eject_rebuild_percent": 90,
                             "weights": [{"member": "A", "weight": 1}, {"member": "B", "weight": 1}]},
                "expected_version": 0,
            }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    server::publish::drain_outbox(&b.app.state).await.unwrap();
    b
}

async fn bench() -> Bench {
    bench_with(|_| {}).await
}

/// The target every test ramps to: C joins at half the traffic.
fn target() -> Value {
    json!([{"member": "A", "weight": 1}, {"member": "B", "weight": 1}, {"member": "C", "weight": 2}])
}

async fn start(b: &Bench, plan: Value) -> i64 {
    let (_, pool) = b.app.get_json("/api/v1/pools/p").await;
    let (status, reply) = b
        .app
        .post_json(
            "/api/v1/pools/p/ramps",
            json!({"plan": plan, "reason": "canary C", "expected_version": pool["version"]}),
        )
        .await;
    assert_eq!(status, 201, "{reply}");
    b.rebase();
    reply["ramp"]["id"].as_i64().unwrap()
}

async fn evaluate(b: &Bench, seconds: i64) -> server::jobs::ramp_guard::Outcome {
    let outcome = server::jobs::ramp_guard::run_once(&b.app.state, b.at(seconds)).await.unwrap();
    assert!(outcome.failed.is_empty(), "{:?}", outcome.failed);
    outcome
}

async fn detail(b: &Bench, id: i64) -> Value {
    let (status, reply) = b.app.get_json(&format!("/api/v1/ramps/{id}")).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

/// The pool's configured weights, as `member=weight` sorted by member.
async fn weights(b: &Bench) -> String {
    let (_, pool) = b.app.get_json("/api/v1/pools/p").await;
    let mut pairs: Vec<String> = pool["snapshot"]["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("{}={}", w["member"].as_str().unwrap(), w["weight"]))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// Records outcomes of a channel in the minute of `seconds` after t0.
async fn report(b: &Bench, channel: &str, ok: u64, fail: u64, seconds: i64) {
    b.clock.set(b.at(seconds));
    let code = client::health::ChannelCode::parse(channel).unwrap();
    let counts = client::health::OutcomeCounts { ok, fail, latency_ms_sum: (ok + fail) * 50, latency_count: ok + fail };
    b.outcomes.record_counts(&code, &counts).await.unwrap();
}

/// Draws `n` times over HTTP and counts the members.
async fn draw(b: &Bench, n: usize) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let (status, reply) = b.app.post_json("/api/v1/pools/p/draw", Value::Null).await;
        assert_eq!(status, 200, "{reply}");
        *counts.entry(reply["member"].as_str().unwrap().to_owned()).or_insert(0) += 1;
    }
    counts
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(m, n)| ((*m).to_owned(), *n)).collect()
}

fn kinds(detail: &Value) -> Vec<String> {
    detail["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_new_channel_ramps_through_four_steps_and_each_batch_is_exact() {
    let b = bench().await;
    let id = start(
        &b,
        json!({"target": target(), "steps": [{"share": 10}, {"share": 25}, {"share": 40}],
               "hold_seconds": 0, "mode": "immediate"}),
    )
    .await;
    // Step 1 is published at once: 10 % for C, the rest split as before.
    assert_eq!(weights(&b).await, "A=9,B=9,C=2");
    assert_eq!(draw(&b, 100).await, counts(&[("A", 45), ("B", 45), ("C", 10)]));
    let expected = [
        ("A=3,B=3,C=2", [("A", 375u64), ("B", 375), ("C", 250)]),
        ("A=3,B=3,C=4", [("A", 300), ("B", 300), ("C", 400)]),
        ("A=1,B=1,C=2", [("A", 250), ("B", 250), ("C", 500)]),
    ];
    for (i, (w, batch)) in expected.iter().enumerate() {
        let outcome = evaluate(&b, 10 * (i as i64 + 1)).await;
        assert_eq!(outcome.changes.len(), 1, "{outcome:?}");
        assert_eq!(weights(&b).await, *w);
        // Ten whole batches of 100: each member exactly its share of each.
        assert_eq!(draw(&b, 1000).await, counts(batch), "step {}", i + 2);
        if i == 0 {
            let metrics = b.app.get("/metrics").await.text().await.unwrap();
            let line = format!(r#"tessera_ramp_canary_share{{pool="p",ramp="{id}"}} 0.25"#);
            assert!(metrics.lines().any(|l| l == line), "the canary's share: {line}");
        }
    }
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["state"], "completed");
    assert_eq!(d["ramp"]["step"], 4);
    assert_eq!(kinds(&d), ["start", "step", "step", "step", "complete"]);
    assert!(d["steps"].as_array().unwrap().iter().all(|s| s["started_at"].is_string()), "{d}");
    // Every step is an ordinary version in the pool's history and the audit trail, source ramp.
    let (_, versions) = b.app.get_json("/api/v1/pools/p/versions").await;
    let ramp_versions =
        versions["versions"].as_array().unwrap().iter().filter(|v| v["action"] == "pool.ramp_step").count();
    assert_eq!(ramp_versions, 4, "{versions}");
    let (_, audit) = b.app.get_json("/api/v1/audit?action=pool.ramp_step").await;
    let rows = audit["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows
        .iter()
        .all(|r| r["source"] == "ramp" && r["reason"].as_str().unwrap().starts_with(&format!("ramp {id}"))));
    // A completed ramp is done: the job leaves it be, and its share's series is gone.
    assert!(evaluate(&b, 60).await.changes.is_empty());
    let metrics = b.app.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("tessera_ramp_canary_share{"), "an ended ramp has no share series");
}

#[tokio::test]
async fn a_pool_changed_outside_the_ramp_pauses_it_and_an_abort_leaves_that_change_alone() {
    let b = bench().await;
    let id = start(&b, json!({"target": target(), "steps": [{"share": 10}, {"share": 25}], "hold_seconds": 0})).await;
    let (_, pool) = b.app.get_json("/api/v1/pools/p").await;
    let outside = json!({"weights": [{"member": "A", "weight": 5}, {"member": "B", "weight": 5}, {"member": "C", "weight": 1}],
                         "mode": "drain", "reason": "ops fix", "expected_version": pool["version"]});
    let (status, reply) = b.app.post_json("/api/v1/pools/p/weights", outside).await;
    assert_eq!(status, 200, "{reply}");
    evaluate(&b, 10).await;
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["state"], "paused", "{d}");
    assert_eq!(weights(&b).await, "A=5,B=5,C=1", "the ramp did not overwrite it");
    let (status, reply) = b.app.post_json(&format!("/api/v1/ramps/{id}/resume"), json!({"reason": "go on"})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "{reply}");
    let (status, reply) = b.app.post_json(&format!("/api/v1/ramps/{id}/step_back"), json!({"reason": "back"})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "{reply}");
    let (status, reply) = b.app.post_json(&format!("/api/v1/ramps/{id}/abort"), json!({"reason": "start over"})).await;
    assert_eq!((status, reply["ramp"]["state"].as_str()), (200, Some("aborted")), "{reply}");
    assert_eq!(weights(&b).await, "A=5,B=5,C=1", "the outside change stays");
}

fn guarded(on_breach: &str, extra: Value) -> Value {
    let mut plan = json!({
        "target": target(), "steps": [{"share": 10}, {"share": 25}, {"share": 40}], "hold_seconds": 600,
        "guards": [{"metric": "success_rate", "threshold": 0.95, "min_samples": 20, "consecutive": 2}],
        "on_breach": on_breach,
    });
    for (k, v) in extra.as_object().unwrap() {
        plan[k] = v.clone();
    }
    plan
}

#[tokio::test]
async fn a_canary_failing_30_percent_breaches_within_two_evaluations_and_abort_returns_to_the_baseline() {
    let b = bench().await;
    let id = start(&b, guarded("abort", json!({}))).await;
    report(&b, "C", 70, 30, 1).await;
    report(&b, "A", 100, 0, 1).await;
    let first = evaluate(&b, 10).await;
    assert_eq!(detail(&b, id).await["ramp"]["state"], "running", "{first:?}");
    let second = evaluate(&b, 20).await;
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["state"], "aborted", "{second:?}");
    assert_eq!(weights(&b).await, "A=1,B=1");
    let breach = d["events"].as_array().unwrap().iter().rfind(|e| e["kind"] == "breach").unwrap().clone();
    assert!(breach["sentence"].as_str().unwrap().contains("70.0%"), "{breach}");
    assert_eq!(breach["measured"]["guards"][0]["verdict"], "breach");
    assert_eq!(breach["measured"]["guards"][0]["samples"], 100);
    let abort = d["events"].as_array().unwrap().iter().rfind(|e| e["kind"] == "abort").unwrap().clone();
    assert!(abort["audit_id"].is_i64(), "{abort}");
    let watch = &b.app.state.metrics.watch;
    assert_eq!(watch.ramp_breaches.get(), 1, "the breach is counted for the alert");
    assert_eq!(watch.ramps.with_label_values(&["running"]).get(), 0, "no live ramp after the abort");
    // An aborted ramp never restarts by itself, whatever happens next.
    report(&b, "C", 100, 0, 40).await;
    assert!(evaluate(&b, 700).await.changes.is_empty());
    assert_eq!(detail(&b, id).await["ramp"]["state"], "aborted");
    assert_eq!(weights(&b).await, "A=1,B=1");
}

#[tokio::test]
async fn step_back_returns_to_the_previous_step_and_pauses() {
    let b = bench().await;
    let id = start(&b, guarded("step_back", json!({}))).await;
    let (status, reply) =
        b.app.post_json(&format!("/api/v1/ramps/{id}/promote"), json!({"reason": "looks fine"})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(weights(&b).await, "A=3,B=3,C=2");
    b.rebase();
    report(&b, "C", 70, 30, 1).await;
    evaluate(&b, 10).await;
    evaluate(&b, 20).await;
    let d = detail(&b, id).await;
    assert_eq!((d["ramp"]["state"].as_str(), d["ramp"]["step"].as_i64()), (Some("paused"), Some(1)), "{d}");
    assert_eq!(weights(&b).await, "A=9,B=9,C=2");
    assert!(kinds(&d).contains(&"step_back".to_owned()));
}

#[tokio::test]
async fn a_gradual_abort_passes_through_intermediate_versions() {
    let b = bench().await;
    let id = start(&b, guarded("abort", json!({"abort_seconds": 40, "steps": [{"share": 40}]}))).await;
    assert_eq!(weights(&b).await, "A=3,B=3,C=4");
    report(&b, "C", 50, 50, 1).await;
    evaluate(&b, 10).await;
    evaluate(&b, 20).await;
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["state"], "aborting", "{d}");
    let mut seen = vec![weights(&b).await];
    for t in [30, 40, 50, 60] {
        evaluate(&b, t).await;
        seen.push(weights(&b).await);
    }
    // Five stages from 40 % to the baseline, the first at once: 32, 24, 16, 8, then 0 % for C.
    assert_eq!(seen, ["A=17,B=17,C=16", "A=19,B=19,C=12", "A=21,B=21,C=8", "A=23,B=23,C=4", "A=1,B=1"], "{seen:?}");
    assert_eq!(detail(&b, id).await["ramp"]["state"], "aborted");
}

#[tokio::test]
async fn no_data_pauses_and_never_aborts() {
    let b = bench().await;
    let id = start(&b, guarded("abort", json!({}))).await;
    // Until the guard's window (5 min) lies in the step, no outcomes only hold it: a new
    // path gets its first traffic when the batch before it has drained.
    evaluate(&b, 10).await;
    assert_eq!(detail(&b, id).await["ramp"]["state"], "running");
    evaluate(&b, 310).await;
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["state"], "paused", "{d}");
    assert_eq!(weights(&b).await, "A=9,B=9,C=2");
    let pause = d["events"].as_array().unwrap().iter().rfind(|e| e["kind"] == "pause").unwrap().clone();
    assert!(pause["sentence"].as_str().unwrap().contains("no canary outcomes"), "{pause}");
    // Resumed, it carries on from where it was.
    let (status, reply) =
        b.app.post_json(&format!("/api/v1/ramps/{id}/resume"), json!({"reason": "C is quiet at night"})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["ramp"]["state"], "running");
}

#[tokio::test]
async fn a_minimum_of_draws_holds_a_step_until_it_is_served() {
    let b = bench().await;
    let id = start(
        &b,
        json!({"target": target(), "steps": [{"share": 10, "min_draws": 50}, {"share": 25}], "hold_seconds": 0}),
    )
    .await;
    evaluate(&b, 10).await;
    let d = detail(&b, id).await;
    assert_eq!(d["ramp"]["step"], 1, "{d}");
    let hold = d["events"].as_array().unwrap().iter().rfind(|e| e["kind"] == "hold").unwrap().clone();
    assert!(hold["sentence"].as_str().unwrap().contains("0 of the 50 draws"), "{hold}");
    draw(&b, 50).await;
    evaluate(&b, 20).await;
    assert_eq!(detail(&b, id).await["ramp"]["step"], 2);
}

#[tokio::test]
async fn a_dry_run_guard_records_breaches_and_changes_nothing() {
    let b = bench().await;
    let plan = json!({
        "target": target(), "steps": [{"share": 10}], "hold_seconds": 600, "on_breach": "abort",
        "guards": [{"metric": "success_rate", "threshold": 0.95, "min_samples": 20, "consecutive": 1, "dry_run": true}],
    });
    let id = start(&b, plan).await;
    report(&b, "C", 60, 40, 1).await;
    evaluate(&b, 10).await;
    evaluate(&b, 20).await;
    let d = detail(&b, id).await;
    assert_eq!((d["ramp"]["state"].as_str(), d["ramp"]["step"].as_i64()), (Some("running"), Some(1)));
    assert_eq!(weights(&b).await, "A=9,B=9,C=2");
    assert_eq!(kinds(&d).iter().filter(|k| *k == "dry_run").count(), 2, "{d}");
}

#[tokio::test]
async fn plans_are_refused_naming_the_field_and_change_nothing() {
    let b = bench().await;
    let (_, pool) = b.app.get_json("/api/v1/pools/p").await;
    let version = pool["version"].clone();
    for (plan, status, field) in [
        (json!({"target": target(), "steps": [{"share": 60}]}), 422, "plan.steps[0].share"),
        (json!({"target": target(), "steps": []}), 400, "plan.steps"),
        (
            json!({"target": [{"member": "A", "weight": 1}, {"member": "Z", "weight": 1}], "steps": [{"share": 10}]}),
            422,
            "plan.target",
        ),
        (
            json!({"target": target(), "steps": [{"share": 10}], "guards": [{"metric": "success_rate", "threshold": 1.5}]}),
            422,
            "plan.guards[0].threshold",
        ),
    ] {
        let (got, reply) = b
            .app
            .post_json("/api/v1/pools/p/ramps", json!({"plan": plan, "reason": "r", "expected_version": version}))
            .await;
        assert_eq!((got, reply["field"].as_str()), (status, Some(field)), "{reply}");
    }
    let (_, list) = b.app.get_json("/api/v1/ramps").await;
    assert_eq!(list["ramps"].as_array().unwrap().len(), 0);
    assert_eq!(weights(&b).await, "A=1,B=1");
    // One live ramp per pool.
    start(&b, json!({"target": target(), "steps": [{"share": 10}]})).await;
    let (_, pool) = b.app.get_json("/api/v1/pools/p").await;
    let (status, reply) = b
        .app
        .post_json(
            "/api/v1/pools/p/ramps",
            json!({"plan": {"target": target(), "steps": [{"share": 20}]}, "reason": "r", "expected_version": pool["version"]}),
        )
        .await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("pool")), "{reply}");
}

/// A webhook receiver: answers 500 to the first request and 200 after, keeping each body.
async fn receiver() -> (String, Arc<Mutex<Vec<(u16, Value)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<(u16, Value)>>> = Arc::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Headers, then Content-Length bytes of body.
            let body = loop {
                let n = socket.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + length {
                        break Some(buf[end + 4..end + 4 + length].to_vec());
                    }
                }
            };
            let Some(body) = body else { continue };
            let status = if kept.lock().unwrap().is_empty() { 500 } else { 200 };
            kept.lock().unwrap().push((status, serde_json::from_slice(&body).unwrap()));
            let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    (url, seen)
}

#[tokio::test]
async fn the_webhook_gets_each_event_once_also_after_a_failed_first_delivery() {
    let (url, seen) = receiver().await;
    let b = bench_with(|s| s.ramps.webhook_url = Some(url.parse().unwrap())).await;
    let id = start(
        &b,
        guarded(
            "abort",
            json!({"guards": [{"metric": "success_rate", "threshold": 0.95, "min_samples": 20, "consecutive": 1}]}),
        ),
    )
    .await;
    let now = Utc::now();
    // The first delivery (step 1) fails; it is tried again after its backoff.
    assert_eq!(server::jobs::notify::run_once(&b.app.state, now).await.unwrap(), (0, 1));
    let watch = &b.app.state.metrics.watch;
    assert_eq!((watch.notification_failures.get(), watch.notifications_pending.get()), (1, 1));
    assert_eq!(server::jobs::notify::run_once(&b.app.state, now + Duration::seconds(1)).await.unwrap(), (0, 0));
    assert_eq!(server::jobs::notify::run_once(&b.app.state, now + Duration::seconds(3)).await.unwrap(), (1, 0));
    // A breach that aborts: a breach and an abort notification.
    report(&b, "C", 50, 50, 1).await;
    evaluate(&b, 10).await;
    assert_eq!(detail(&b, id).await["ramp"]["state"], "aborted");
    assert_eq!(server::jobs::notify::run_once(&b.app.state, now + Duration::seconds(4)).await.unwrap(), (2, 0));
    assert_eq!(server::jobs::notify::run_once(&b.app.state, now + Duration::seconds(600)).await.unwrap(), (0, 0));
    assert_eq!((watch.notification_failures.get(), watch.notifications_pending.get()), (1, 0), "all delivered");
    let seen = seen.lock().unwrap().clone();
    let delivered: Vec<&Value> = seen.iter().filter(|(status, _)| *status == 200).map(|(_, body)| body).collect();
    let events: Vec<&str> = delivered.iter().map(|b| b["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["step", "breach", "abort"], "{seen:?}");
    let mut ids: Vec<&str> = delivered.iter().map(|b| b["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each event once");
    assert!(delivered.iter().all(|b| b["text"].as_str().unwrap().contains(&format!("ramp {id}"))));
    assert_eq!(seen[0].1["id"], delivered[0]["id"], "the failed delivery was the same event, sent again");
}

#[tokio::test]
async fn the_daily_prune_takes_old_ramp_samples_and_sent_notifications_and_keeps_the_rest() {
    let b = bench().await;
    let id = start(&b, guarded("pause", json!({}))).await;
    report(&b, "C", 99, 1, 1).await;
    evaluate(&b, 10).await;
    let db = &b.app.state.db;
    let old = Utc::now() - Duration::days(8);
    sqlx::query("insert into ramp_sample (ramp_id, at, step, measured) values ($1, $2, 1, '{}')")
        .bind(id)
        .bind(old)
        .execute(db)
        .await
        .unwrap();
    for (delivered, created) in [(Some(old), old), (None, old), (Some(Utc::now()), Utc::now())] {
        sqlx::query("insert into notification (event, body, created_at, delivered_at) values ('step', '{}', $1, $2)")
            .bind(created)
            .bind(delivered)
            .execute(db)
            .await
            .unwrap();
    }
    let count = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>(&format!("select count(*) from {table}")).fetch_one(db).await.unwrap()
    };
    assert_eq!((count("ramp_sample").await, count("notification").await), (2, 3));
    assert!(server::jobs::sample_prune::run_once(&b.app.state).await.unwrap() >= 2);
    // The recent sample stays; of the notifications, the one still to deliver and the new one.
    assert_eq!((count("ramp_sample").await, count("notification").await), (1, 2));
    assert_eq!(detail(&b, id).await["samples"].as_array().unwrap().len(), 1);
}
