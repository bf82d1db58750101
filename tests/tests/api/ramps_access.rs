//! Ramps with access control on, on the demo data: who may start, promote, pause, resume,
//! step back and abort (refusals change nothing), and a ramp under an approval policy,
//! which starts only as an approved change request and then runs its steps on its own.

use std::collections::HashMap;

use integration::ui::Session;
use integration::{hold_jobs, spawn_app_with, HeldJobs, TestApp};
use serde_json::{json, Value};

/// A server with access control on, the demo data published, the guard job led by the
/// test, and a session per demo role plus a second pm (`pm-two`).
async fn app() -> (TestApp, HeldJobs, HashMap<String, Session>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let jobs = hold_jobs(&app, &["ramp_guard"]).await;
    let report = integration::seed_demo(&app).await;
    let passwords: HashMap<String, String> = report.users.into_iter().map(|(name, _, p)| (name, p)).collect();
    let mut sessions = HashMap::new();
    for role in ["pm", "admin", "viewer", "operator", "auditor"] {
        let name = format!("demo-{role}");
        let session = Session::sign_in(&app, &name, &passwords[&name]).await;
        sessions.insert(name, session);
    }
    let (status, created) =
        post(&app, &sessions["demo-admin"], "/api/v1/users", json!({"name": "pm-two", "role": "pm"})).await;
    assert_eq!(status, 201, "{created}");
    let second = Session::sign_in(&app, "pm-two", created["password"].as_str().unwrap()).await;
    sessions.insert("pm-two".to_owned(), second);
    (app, jobs, sessions)
}

async fn send(app: &TestApp, s: &Session, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    s.send(app, method, path, body).await
}

async fn post(app: &TestApp, s: &Session, path: &str, body: Value) -> (u16, Value) {
    send(app, s, reqwest::Method::POST, path, body).await
}

/// UNION_C from 25 % of cn-pay to 40 %, in two steps and the target, no hold.
fn plan() -> Value {
    json!({
        "target": [{"member": "ALIPAY_A", "weight": 45}, {"member": "WECHAT_B", "weight": 30}, {"member": "UNION_C", "weight": 50}],
        "steps": [{"share": 30}, {"share": 35}],
        "hold_seconds": 0,
    })
}

async fn ramp(app: &TestApp, s: &Session, id: i64) -> Value {
    let (status, reply) = send(app, s, reqwest::Method::GET, &format!("/api/v1/ramps/{id}"), Value::Null).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

async fn ramp_audit(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("select action from audit where entity like 'ramp:%' order by id")
        .fetch_all(&app.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn only_the_allowed_roles_control_a_ramp_and_refused_controls_change_nothing() {
    let (app, _jobs, s) = app().await;
    integration::ui::without_demo_policy(&app).await;
    let (status, refused) = post(
        &app,
        &s["demo-operator"],
        "/api/v1/pools/cn-pay/ramps",
        json!({"plan": plan(), "reason": "r", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 403, "operators do not start ramps: {refused}");
    let (status, started) = post(
        &app,
        &s["demo-pm"],
        "/api/v1/pools/cn-pay/ramps",
        json!({"plan": plan(), "reason": "UnionPay C", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let id = started["ramp"]["id"].as_i64().unwrap();
    let control = |who: &'static str, what: &'static str| {
        let app = &app;
        let s = &s;
        async move {
            post(app, &s[who], &format!("/api/v1/ramps/{id}/{what}"), json!({"reason": format!("{who} {what}")})).await
        }
    };

    // Refused: nothing changes, nothing is audited.
    for (who, what) in [
        ("demo-viewer", "promote"),
        ("demo-viewer", "pause"),
        ("demo-viewer", "abort"),
        ("demo-auditor", "abort"),
        ("demo-operator", "promote"),
        ("demo-operator", "promote_to_end"),
        ("demo-operator", "resume"),
    ] {
        let (status, reply) = control(who, what).await;
        assert_eq!(status, 403, "{who} {what}: {reply}");
    }
    let (status, reply) = post(&app, &s["demo-pm"], &format!("/api/v1/ramps/{id}/pause"), json!({})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("reason")), "{reply}");
    let r = ramp(&app, &s["demo-viewer"], id).await;
    assert_eq!((r["ramp"]["state"].as_str(), r["ramp"]["step"].as_i64()), (Some("running"), Some(1)));
    assert_eq!(ramp_audit(&app).await, ["ramp.start"]);

    // Allowed: operators take traffic off the new path, pms move it on.
    assert_eq!(control("demo-operator", "pause").await.0, 200);
    let (status, reply) = control("demo-operator", "pause").await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "a paused ramp is not paused again: {reply}");
    assert_eq!(control("demo-pm", "resume").await.0, 200);
    assert_eq!(control("demo-operator", "step_back").await.0, 200);
    let r = ramp(&app, &s["demo-viewer"], id).await;
    assert_eq!((r["ramp"]["state"].as_str(), r["ramp"]["step"].as_i64()), (Some("paused"), Some(0)));
    assert_eq!(control("demo-pm", "promote").await.0, 200);
    assert_eq!(control("demo-operator", "abort").await.0, 200);
    let r = ramp(&app, &s["demo-viewer"], id).await;
    assert_eq!(r["ramp"]["state"], "aborted");
    let (status, reply) = control("demo-pm", "promote").await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "an aborted ramp stays aborted: {reply}");
    assert_eq!(
        ramp_audit(&app).await,
        ["ramp.start", "ramp.pause", "ramp.resume", "ramp.step_back", "ramp.promote", "ramp.abort"]
    );
    // Each control is audited with who used it and their reason.
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "select action, actor, coalesce(reason, '') from audit where entity = $1 and action <> 'ramp.start' order by id",
    )
    .bind(format!("ramp:{id}"))
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    for (action, actor, reason) in &rows {
        assert_eq!(reason, &format!("{actor} {}", action.trim_start_matches("ramp.")), "{rows:?}");
    }
    assert_eq!(rows[0].1, "demo-operator");
}

#[tokio::test]
async fn under_an_approval_policy_a_ramp_is_a_change_request_approved_once_then_its_steps_run() {
    let (app, _jobs, s) = app().await;
    // The direct start is refused, naming the policy.
    let (status, refused) = post(
        &app,
        &s["demo-pm"],
        "/api/v1/pools/cn-pay/ramps",
        json!({"plan": plan(), "reason": "r", "expected_version": 1}),
    )
    .await;
    assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{refused}");
    let (status, request) = post(
        &app,
        &s["demo-pm"],
        "/api/v1/changes",
        json!({"pool": "cn-pay", "operation": {"kind": "pool.ramp", "plan": plan()}, "reason": "UnionPay C", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 201, "{request}");
    let id = request["id"].as_i64().unwrap();
    // Reviewers see the baseline and the target.
    assert_eq!(request["diff"]["after"], plan()["target"], "{request}");
    assert_eq!(request["diff"]["before"][2], json!({"member": "UNION_C", "weight": 25}), "{request}");
    let (status, approved) = post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": request["content_hash"], "comment": "shares look right"}),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    let (status, applied) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    assert_eq!((status, applied["state"].as_str()), (200, Some("applied")), "{applied}");
    let ramp_id = applied["outcome"]["ramp"].as_i64().unwrap();
    let r = ramp(&app, &s["demo-viewer"], ramp_id).await;
    assert_eq!((r["ramp"]["step"].as_i64(), r["ramp"]["change_request"].as_i64()), (Some(1), Some(id)), "{r}");
    // Its steps then run without another approval.
    for step in [2, 3] {
        server::jobs::ramp_guard::run_once(&app.state, chrono::Utc::now() + chrono::Duration::seconds(step))
            .await
            .unwrap();
    }
    let r = ramp(&app, &s["demo-viewer"], ramp_id).await;
    assert_eq!((r["ramp"]["state"].as_str(), r["ramp"]["step"].as_i64()), (Some("completed"), Some(3)), "{r}");
    let open: i64 = sqlx::query_scalar("select count(*) from change_request where state <> 'applied'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(open, 0, "no further request was needed");
}
