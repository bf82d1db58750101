//! The usage ledger over HTTP with the jobs run by hand: settles reach Postgres through the
//! usage stream, the usage report and its CSV read them, and a Redis that loses a tenant's
//! keys gets its counters back from the ledger, with the settles its stream lost written
//! from the instance's own records and a settle whose reservation was lost charged late.

use std::time::Duration;

use integration::{json_reply, spawn_app_with, with_json, TestApp};
use serde_json::{json, Value};
use server::configuration::AdminAccess;

pub(crate) const TOKEN: &str = "usage-admin-token-0123456789";

/// An app with the admin API on (bearer [`TOKEN`]).
pub(crate) async fn app() -> TestApp {
    spawn_app_with(|s| {
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
    })
    .await
}

pub(crate) async fn send(app: &TestApp, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    json_reply(with_json(app.request(method, path).bearer_auth(TOKEN), &body)).await
}

/// A plan of 10,000 tokens a month and a tenant `acme` on it, published.
async fn acme(app: &TestApp) {
    let plan = json!({"name": "pro", "monthly_tokens": 10000, "daily_requests": 100, "concurrency": 10});
    let (status, reply) = send(app, reqwest::Method::POST, "/api/v1/plans", plan).await;
    assert_eq!(status, 201, "{reply}");
    let tenant = json!({"plan": "pro", "expected_version": 0, "reason": "signed"});
    let (status, reply) = send(app, reqwest::Method::PUT, "/api/v1/tenants/acme", tenant).await;
    assert_eq!(status, 200, "{reply}");
}

async fn reserve(app: &TestApp, rid: &str, tokens: u64) {
    let body = json!({"request_id": rid, "tokens": tokens});
    let (status, reply) = send(app, reqwest::Method::POST, "/api/v1/tenants/acme/quota/reserve", body).await;
    assert_eq!((status, reply["result"].as_str()), (200, Some("reserved")), "{reply}");
}

async fn settle(app: &TestApp, rid: &str, actual: u64) -> Value {
    let body = json!({"request_id": rid, "actual_tokens": actual});
    let (status, reply) = send(app, reqwest::Method::POST, "/api/v1/tenants/acme/quota/settle", body).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

async fn plan_used(app: &TestApp) -> u64 {
    let (status, usage) = send(app, reqwest::Method::GET, "/api/v1/tenants/acme/quota", Value::Null).await;
    assert_eq!(status, 200, "{usage}");
    let plan = usage["buckets"].as_array().unwrap().iter().find(|b| b["id"] == "plan").unwrap().clone();
    plan["used"].as_u64().unwrap()
}

async fn ledger_rows(app: &TestApp) -> Vec<(String, String, Option<i64>, String)> {
    sqlx::query_as("select request_id, outcome, actual, source from usage_ledger order by request_id, outcome")
        .fetch_all(&app.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn settles_reach_the_ledger_once_and_the_usage_report_and_csv_read_it() {
    let app = app().await;
    acme(&app).await;
    reserve(&app, "r-1", 500).await;
    settle(&app, "r-1", 420).await;
    reserve(&app, "r-2", 100).await;
    let (status, _) =
        send(&app, reqwest::Method::POST, "/api/v1/tenants/acme/quota/release", json!({"request_id": "r-2"})).await;
    assert_eq!(status, 200);

    // Drained twice: the second run finds nothing new.
    let first = server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    let second = server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    assert_eq!((first.read, first.written), (2, 2));
    assert_eq!(second.read, 0);
    assert_eq!(
        ledger_rows(&app).await,
        vec![
            ("r-1".to_owned(), "settled".to_owned(), Some(420), "stream".to_owned()),
            ("r-2".to_owned(), "released".to_owned(), None, "stream".to_owned()),
        ]
    );
    // The instance's own record of r-1 finds the ledger holding it: nothing written twice.
    let confirmed = server::usage::confirm(&app.state, Duration::ZERO).await.unwrap();
    assert_eq!((confirmed.read, confirmed.written, confirmed.applied), (1, 0, 0));

    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let (status, report) = send(&app, reqwest::Method::GET, "/api/v1/tenants/acme/usage", Value::Null).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["group"], "day");
    assert_eq!(report["rows"].as_array().unwrap().len(), 1, "{report}");
    let row = &report["rows"][0];
    assert_eq!(row["key"], today.as_str());
    assert_eq!(
        (row["settled"].as_u64(), row["released"].as_u64(), row["tokens"].as_u64()),
        (Some(1), Some(1), Some(420))
    );
    assert_eq!((row["plan_tokens"].as_u64(), row["reserved"].as_u64()), (Some(420), Some(500)));
    assert_eq!(report["total"]["tokens"], 420);

    let (status, by_model) =
        send(&app, reqwest::Method::GET, "/api/v1/tenants/acme/usage?group=model", Value::Null).await;
    assert_eq!((status, by_model["rows"][0]["key"].as_str()), (200, Some("unknown")), "{by_model}");

    let csv =
        app.request(reqwest::Method::GET, "/api/v1/tenants/acme/usage.csv").bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(csv.status(), 200);
    assert!(csv.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    let text = csv.text().await.unwrap();
    assert_eq!(
        text,
        format!(
            "key,settled,released,expired,tokens,plan_tokens,grant_tokens,reserved\n{today},1,1,0,420,420,0,500\ntotal,1,1,0,420,420,0,500\n"
        )
    );

    // Refusals name the parameter; an unknown tenant is 404.
    for (query, field) in [
        ("from=yesterday", "from"),
        ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "to"),
        ("from=2024-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "to"),
        ("group=hour", "group"),
    ] {
        let (status, reply) =
            send(&app, reqwest::Method::GET, &format!("/api/v1/tenants/acme/usage?{query}"), Value::Null).await;
        assert_eq!((status, reply["field"].as_str()), (400, Some(field)), "{query}: {reply}");
    }
    let (status, _) = send(&app, reqwest::Method::GET, "/api/v1/tenants/nobody/usage", Value::Null).await;
    assert_eq!(status, 404);

    // A reservation estimated for a model: the ledger keeps the model with its use.
    let body = json!({"request_id": "r-3", "prompt": "hello there", "max_tokens": 20, "model": "gpt-4o"});
    let (status, reply) = send(&app, reqwest::Method::POST, "/api/v1/tenants/acme/quota/reserve", body).await;
    assert_eq!(status, 200, "{reply}");
    settle(&app, "r-3", 12).await;
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    let (status, by_model) =
        send(&app, reqwest::Method::GET, "/api/v1/tenants/acme/usage?group=model", Value::Null).await;
    assert_eq!(status, 200, "{by_model}");
    let keys: Vec<(&str, u64)> = by_model["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["tokens"].as_u64().unwrap()))
        .collect();
    assert_eq!(keys, vec![("gpt-4o", 12), ("unknown", 420)]);
}

#[tokio::test]
async fn after_redis_loses_a_tenant_every_token_callers_were_told_was_settled_is_charged_again() {
    let app = app().await;
    acme(&app).await;
    // r-1 settled and drained; r-2 settled, still in the stream; r-3 open.
    reserve(&app, "r-1", 200).await;
    settle(&app, "r-1", 100).await;
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    reserve(&app, "r-2", 200).await;
    settle(&app, "r-2", 50).await;
    reserve(&app, "r-3", 200).await;
    assert_eq!(plan_used(&app).await, 150);

    // Redis loses every key of this deployment (a restart without persistence).
    let mut conn = app.state.redis.connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(app.state.keys.scan_pattern()).query_async(&mut conn).await.unwrap();
    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await.unwrap();

    // Republished with the counters from the ledger: r-1's 100.
    server::jobs::reconcile::run_once(&app.state).await.unwrap();
    assert_eq!(plan_used(&app).await, 100);
    // The instance writes r-2, which the stream lost, and charges it.
    let confirmed = server::usage::confirm(&app.state, Duration::ZERO).await.unwrap();
    assert_eq!((confirmed.written, confirmed.applied), (1, 1), "{confirmed:?}");
    assert_eq!(plan_used(&app).await, 150);
    // r-3's reservation was lost: its settle is charged from its body, flagged late.
    let late = settle(&app, "r-3", 30).await;
    assert_eq!(
        (late["result"].as_str(), late["late"].as_bool(), late["reserved"].as_u64()),
        (Some("settled"), Some(true), Some(0))
    );
    assert_eq!(plan_used(&app).await, 180);
    // Nothing is charged twice by any later run.
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    server::usage::confirm(&app.state, Duration::ZERO).await.unwrap();
    assert_eq!(plan_used(&app).await, 180);
    let settled: Vec<(String, Option<i64>)> =
        ledger_rows(&app).await.into_iter().filter(|r| r.1 == "settled").map(|r| (r.0, r.2)).collect();
    assert_eq!(
        settled,
        vec![("r-1".to_owned(), Some(100)), ("r-2".to_owned(), Some(50)), ("r-3".to_owned(), Some(30))]
    );
    // A second loss restores all three from the ledger.
    let keys: Vec<String> = redis::cmd("KEYS").arg(app.state.keys.scan_pattern()).query_async(&mut conn).await.unwrap();
    redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await.unwrap();
    server::jobs::reconcile::run_once(&app.state).await.unwrap();
    assert_eq!(plan_used(&app).await, 180);
}

#[tokio::test]
async fn the_compensation_finds_counters_that_differ_from_the_ledger_audits_them_and_corrects_beyond_what_is_in_flight()
{
    let app = app().await;
    acme(&app).await;
    reserve(&app, "r-1", 200).await;
    settle(&app, "r-1", 100).await;
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    reserve(&app, "r-2", 200).await;
    settle(&app, "r-2", 40).await;

    // In step: one settle in the ledger, one still in the stream.
    let clean = server::usage::compensate::compensate(&app.state, true).await.unwrap();
    assert_eq!((clean.compared, clean.drifts.len()), (1, 0), "{clean:?}");

    // Redis counts 500 tokens the ledger never saw.
    let period = chrono::Utc::now().format("%Y-%m").to_string();
    let mut conn = app.state.redis.connection().await.unwrap();
    redis::cmd("HINCRBY")
        .arg(app.state.keys.quota_period("acme", &period))
        .arg("plan_used")
        .arg(500)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();

    let dry = server::usage::compensate::compensate(&app.state, false).await.unwrap();
    assert_eq!(dry.drifts.len(), 1, "{dry:?}");
    let d = &dry.drifts[0];
    assert_eq!((d.bucket.as_str(), d.redis, d.ledger, d.in_flight, d.corrected), ("plan", 640, 140, 100, false));
    assert_eq!(plan_used(&app).await, 640);
    assert!(app.state.metrics.render().contains(r#"tessera_usage_drift_tokens{bucket="plan",tenant="acme"} 500"#));

    let fixed = server::usage::compensate::compensate(&app.state, true).await.unwrap();
    assert!(fixed.drifts[0].corrected, "{fixed:?}");
    assert_eq!(plan_used(&app).await, 140);
    let again = server::usage::compensate::compensate(&app.state, true).await.unwrap();
    assert!(again.drifts.is_empty(), "{again:?}");

    let rows: Vec<(String, String, Value, Value)> = sqlx::query_as(
        "select actor, source, before, after from audit where action = 'quota.compensate' and entity = 'tenant:acme' order by id",
    )
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "one row for each run that found a difference: {rows:?}");
    assert_eq!((rows[1].0.as_str(), rows[1].1.as_str()), ("compensation", "system"));
    assert_eq!(rows[1].2, json!({"plan": 640}));
    assert_eq!(rows[1].3, json!({"plan": {"ledger": 140, "in_flight": 100, "corrected": true}}));
}

#[tokio::test]
async fn journal_operations_of_a_tenant_that_does_not_exist_are_set_aside_and_listed_never_dropped() {
    // A journal carried over from elsewhere: an admission (settled) and a queued release of
    // a tenant this deployment does not have, read back by the next process.
    let app = app().await;
    app.stop_server().await;
    app.state.quotas.close_journal();
    let path = app.settings.quota_journal.clone();
    let lines = [
        r#"{"t":"admit","tenant":"ghost","request":"r1","tokens":40}"#,
        r#"{"t":"close","tenant":"ghost","request":"r1","actual":30,"partial":false}"#,
        r#"{"t":"release","tenant":"ghost","request":"r2"}"#,
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let app = integration::restart(app).await;
    assert_eq!(app.state.quotas.offline_summary().operations, 2);

    // Redis has no such tenant, and never will: the replay leaves them where they are.
    assert!(app.state.quotas.flush_offline().await.is_err());
    assert_eq!(app.state.quotas.offline_summary().operations, 2);

    // Set aside: into Postgres first, then out of the journal (and its file).
    let taken = server::usage::dead_letters::set_aside_unknown(&app.state).await.unwrap();
    assert_eq!(taken, 2);
    assert_eq!(app.state.quotas.offline_summary().operations, 0);
    assert_eq!(server::usage::dead_letters::set_aside_unknown(&app.state).await.unwrap(), 0, "once");
    let on_disk = std::fs::read_to_string(&path).unwrap();
    assert!(on_disk.is_empty() || on_disk.lines().filter(|l| l.contains(r#""t":"done""#)).count() == 2, "{on_disk}");

    let (status, page) = app.send(reqwest::Method::GET, "/api/v1/usage/dead_letters", Some(TOKEN), Value::Null).await;
    assert_eq!((status, &page["total"]), (200, &json!(2)), "{page}");
    let rows = page["rows"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str, Value, Value, Value)> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default();
            (
                s("tenant"),
                s("request_id"),
                s("operation"),
                r["tokens"].clone(),
                r["actual"].clone(),
                r["closed"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("ghost", "r2", "release", json!(null), json!(null), json!(null)),
            ("ghost", "r1", "admit", json!(40), json!(30), json!("settled")),
        ]
    );
    assert_eq!(rows[0]["journal"], json!(path.display().to_string()));
    let (status, next) = app
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/usage/dead_letters?before={}&limit=1", rows[0]["id"]),
            Some(TOKEN),
            Value::Null,
        )
        .await;
    assert_eq!(
        (status, next["rows"].as_array().unwrap().len(), &next["rows"][0]["request_id"]),
        (200, 1, &json!("r1"))
    );
    for (query, field) in [("limit=0", "limit"), ("limit=501", "limit"), ("before=0", "before")] {
        let path = format!("/api/v1/usage/dead_letters?{query}");
        let (status, body) = app.send(reqwest::Method::GET, &path, Some(TOKEN), Value::Null).await;
        assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{query}: {body}");
    }
    let (status, _) =
        app.send(reqwest::Method::GET, "/api/v1/usage/dead_letters?limit=x", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_ledger_row_whose_charge_was_never_decided_is_retried_until_charged_once() {
    let app = app().await;
    acme(&app).await;
    reserve(&app, "r-1", 500).await;
    settle(&app, "r-1", 420).await;
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    let pending = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from usage_ledger where charge_pending")
            .fetch_one(&app.state.db)
            .await
            .unwrap()
    };
    assert_eq!(pending().await, 0, "a row from the stream of the live counters is decided at once");
    assert_eq!(plan_used(&app).await, 420);

    // A crash between a ledger insert and its charge: an instance's record of a settle the
    // counters lost is in the ledger, marked, and not charged.
    let generation: String = sqlx::query_scalar("select generation from usage_ledger where request_id = 'r-1'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    let now = chrono::Utc::now();
    let record = client::quota::UsageRecord {
        tenant: client::quota::TenantId::parse("acme").unwrap(),
        request_id: "lost-1".into(),
        outcome: client::quota::UsageOutcome::Settled,
        late: false,
        reserved: 100,
        actual: Some(80),
        charged: vec![client::quota::Part { bucket: "plan".into(), tokens: 80 }],
        plan_periods: vec![(now.format("%Y-%m").to_string(), 80)],
        reserved_at_ms: now.timestamp_millis() - 1_000,
        at_ms: now.timestamp_millis(),
        generation,
        model: None,
        reserved_parts: vec![client::quota::Part { bucket: "plan".into(), tokens: 100 }],
        deadline_ms: Some(now.timestamp_millis() + 599_000),
        entry: None,
    };
    let (written, _) =
        server::usage::store::insert(&app.state.db, &[record], server::usage::store::Source::Instance).await.unwrap();
    assert_eq!(written.len(), 1);
    assert_eq!((pending().await, plan_used(&app).await), (1, 420), "in the ledger, not in the counters");
    // A row marked for longer than a drain takes (a failure, a crash): meanwhile the
    // compensation passes over the tenant, since the counters may or may not hold the row,
    // so no difference is judged (nor corrected).
    sqlx::query("update usage_ledger set recorded_at = now() - interval '2 minutes' where charge_pending")
        .execute(&app.state.db)
        .await
        .unwrap();
    let report = server::usage::compensate::compensate(&app.state, true).await.unwrap();
    assert!(report.skipped.contains(&"acme".to_owned()) && report.drifts.is_empty(), "{report:?}");
    assert_eq!(plan_used(&app).await, 420);

    // The next drain decides it: charged once, the mark cleared; the next one changes nothing.
    let drained = server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    assert_eq!(drained.applied, 1);
    assert_eq!((pending().await, plan_used(&app).await), (0, 500));
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    assert_eq!(plan_used(&app).await, 500, "charged once");
    let metrics =
        app.request(reqwest::Method::GET, "/metrics").bearer_auth(TOKEN).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tessera_usage_uncharged_rows 0"), "the gauge says none wait");
}

#[tokio::test]
async fn a_request_id_used_again_after_its_done_marker_expired_is_a_named_row_of_its_own() {
    let app = app().await;
    acme(&app).await;
    reserve(&app, "r-1", 500).await;
    settle(&app, "r-1", 420).await;
    server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    // The done marker expires with the idempotency window and the ledger's answer with the
    // tenant's retention: the request id is new again, and a caller that uses it again
    // makes a new reservation, charged by the counters.
    server::usage::confirm(&app.state, Duration::ZERO).await.unwrap();
    integration::forget_done_marker(&app, "acme", "r-1").await;
    integration::age_ledger_rows(&app, "r-1", 63).await;
    reserve(&app, "r-1", 100).await;
    settle(&app, "r-1", 80).await;
    assert_eq!(plan_used(&app).await, 500);

    // The ledger holds the second use as a row of its own, named as a reuse of the first.
    let drained = server::jobs::usage_drain::run_once(&app.state).await.unwrap();
    assert_eq!(drained.written, 1, "the second use is not dropped");
    let rows: Vec<(i64, Option<i64>, Option<i64>)> =
        sqlx::query_as("select id, reuse_of, actual from usage_ledger where request_id = 'r-1' order by id")
            .fetch_all(&app.state.db)
            .await
            .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].1, rows[0].2), (None, Some(420)));
    assert_eq!((rows[1].1, rows[1].2), (Some(rows[0].0), Some(80)));
    // The instance's own copies of both settles are the same rows: nothing written twice.
    let confirmed = server::usage::confirm(&app.state, Duration::ZERO).await.unwrap();
    assert_eq!(confirmed.written, 0, "{confirmed:?}");
    let metrics =
        app.request(reqwest::Method::GET, "/metrics").bearer_auth(TOKEN).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tessera_usage_reused_request_ids_total 1"), "the reuse is counted");
    // The counters and the ledger agree: both hold both uses.
    let report = server::usage::compensate::compensate(&app.state, false).await.unwrap();
    assert_eq!((report.compared, report.drifts.len()), (1, 0), "{report:?}");
}
