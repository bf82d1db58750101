//! Change requests and approval policies against a running server with access control on:
//! where a policy applies, weights change only through a request that another person in
//! the policy's roles approved; the author never approves (admins included); an approval
//! names the content it saw; a rejection ends the request; a request made against a
//! version that moved is suspended; every step is in the audit chain.

use std::collections::HashMap;

use integration::ui::Session;
use integration::{spawn_app_with, TestApp};
use serde_json::{json, Value};

async fn login(app: &TestApp, name: &str, password: &str) -> Session {
    Session::sign_in(app, name, password).await
}

/// A server with access control on, the demo data published, the demo users, and a second
/// pm (`pm-two`): the sessions by name.
async fn app() -> (TestApp, HashMap<String, Session>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let report = integration::seed_demo(&app).await;
    let passwords: HashMap<String, String> = report.users.into_iter().map(|(name, _, p)| (name, p)).collect();
    let mut sessions = HashMap::new();
    for role in ["pm", "admin", "viewer", "operator", "auditor"] {
        let name = format!("demo-{role}");
        let session = login(&app, &name, &passwords[&name]).await;
        sessions.insert(name, session);
    }
    let (status, created) = send(
        &app,
        &sessions["demo-admin"],
        reqwest::Method::POST,
        "/api/v1/users",
        json!({"name": "pm-two", "role": "pm"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    sessions.insert("pm-two".to_owned(), login(&app, "pm-two", created["password"].as_str().unwrap()).await);
    (app, sessions)
}

async fn send(app: &TestApp, s: &Session, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    s.send(app, method, path, body).await
}

async fn post(app: &TestApp, s: &Session, path: &str, body: Value) -> (u16, Value) {
    send(app, s, reqwest::Method::POST, path, body).await
}

/// The demo seed's policy: changes to cn-pay need one approval by a pm or an admin.
async fn cn_pay_policy(app: &TestApp, admin: &Session) {
    let (status, list) = send(app, admin, reqwest::Method::GET, "/api/v1/policies", Value::Null).await;
    assert_eq!(status, 200, "{list}");
    let policy = list["policies"].as_array().unwrap().iter().find(|p| p["scope"] == "pool:cn-pay").cloned();
    let policy = policy.unwrap_or_else(|| panic!("the demo seed's policy on cn-pay: {list}"));
    assert_eq!((policy["required_approvals"].as_i64(), policy["version"].as_i64()), (Some(1), Some(1)), "{policy}");
    assert_eq!(policy["approver_roles"], json!(["pm", "admin"]), "{policy}");
}

fn proposal(alipay: u64, expected_version: i64) -> Value {
    json!({"pool": "cn-pay", "operation": {"kind": "pool.weights", "weights": [{"member": "ALIPAY_A", "weight": alipay},
           {"member": "WECHAT_B", "weight": 30}, {"member": "UNION_C", "weight": 25}], "mode": "drain"},
           "reason": "gray release of ALIPAY_A", "expected_version": expected_version})
}

/// Rows in the tables a refused step must leave as they were.
async fn footprint(app: &TestApp) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in [
        "pool",
        "pool_member",
        "snapshot",
        "audit",
        "outbox",
        "change_request",
        "change_review",
        "approval_policy",
        "channel",
        "plan",
        "tenant",
        "quota_grant",
        "config_history",
    ] {
        counts
            .push(sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&app.state.db).await.unwrap());
    }
    let states: Option<String> = sqlx::query_scalar("select string_agg(state, ',' order by id) from change_request")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    counts.push(states.map_or(0, |s| s.len() as i64));
    counts
}

#[tokio::test]
async fn a_pm_proposes_another_pm_approves_and_the_change_applies_with_both_in_the_audit_trail() {
    // Arrange
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;

    // Act: the direct write is refused; a request is submitted, approved, applied
    let (status, refused) = post(
        &app,
        &s["demo-pm"],
        "/api/v1/pools/cn-pay/weights",
        json!({"weights": [{"member": "ALIPAY_A", "weight": 50}, {"member": "WECHAT_B", "weight": 30},
               {"member": "UNION_C", "weight": 25}], "mode": "drain", "reason": "direct", "expected_version": 1}),
    )
    .await;
    let (status_submit, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(50, 1)).await;
    let id = request["id"].as_i64().unwrap_or_default();
    let hash = request["content_hash"].as_str().unwrap_or_default().to_owned();
    let (status_early, early) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    let (status_approve, approved) = post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": hash, "comment": "looks right"}),
    )
    .await;
    let (status_apply, applied) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;

    // Assert
    assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("pool:cn-pay"), "{refused}");
    assert_eq!((status_submit, request["state"].as_str()), (201, Some("in_review")), "{request}");
    assert_eq!(request["diff"]["moved_percent"], 2.62, "45/30/25 to 50/30/25 moves 2.62 % of the traffic: {request}");
    assert_eq!((status_early, early["field"].as_str()), (409, Some("state")), "not approved yet: {early}");
    assert_eq!((status_approve, approved["state"].as_str()), (200, Some("approved")), "{approved}");
    assert_eq!((status_apply, applied["state"].as_str()), (200, Some("applied")), "{applied}");
    assert_eq!(applied["outcome"]["version"], 2, "{applied}");
    let (_, pool) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    assert_eq!(pool["snapshot"]["weights"][0], json!({"member": "ALIPAY_A", "weight": 50}), "{pool}");
    let published =
        app.state.pool_admin.snapshot(&client::pool::PoolName::parse("cn-pay").unwrap()).await.unwrap().unwrap();
    assert_eq!(Some(published.version), applied["outcome"]["published_version"].as_u64(), "Redis has it");
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select action, actor from audit where entity = $1 or (entity = 'pool:cn-pay' and action = 'pool.weights')
         order by id",
    )
    .bind(format!("change:{id}"))
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    let rows: Vec<(&str, &str)> = rows.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("change.submit", "demo-pm"),
            ("change.approve", "pm-two"),
            ("pool.weights", "demo-pm"),
            ("change.apply", "demo-pm")
        ]
    );
    let reason: String =
        sqlx::query_scalar("select reason from audit where action = 'pool.weights' and entity = 'pool:cn-pay'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(reason, format!("change request {id}: gray release of ALIPAY_A"));
}

#[tokio::test]
async fn nobody_approves_their_own_request_a_stale_hash_or_a_rejection_blocks_and_refusals_change_nothing() {
    // Arrange: a request by the admin, and one by a pm
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, by_admin) = post(&app, &s["demo-admin"], "/api/v1/changes", proposal(40, 1)).await;
    let (_, by_pm) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(60, 1)).await;
    let (a, p) = (by_admin["id"].as_i64().unwrap(), by_pm["id"].as_i64().unwrap());
    let hash = |r: &Value| r["content_hash"].as_str().unwrap().to_owned();
    let before = footprint(&app).await;

    // Act + Assert: refusals
    let approve = |id: i64, h: String| (format!("/api/v1/changes/{id}/approve"), json!({"content_hash": h}));
    let (path, body) = approve(a, hash(&by_admin));
    let (status, reply) = post(&app, &s["demo-admin"], &path, body).await;
    assert_eq!(status, 403, "an admin does not approve their own request: {reply}");
    let (path, body) = approve(p, hash(&by_pm));
    assert_eq!(post(&app, &s["demo-pm"], &path, body.clone()).await.0, 403, "nor a pm");
    assert_eq!(post(&app, &s["demo-viewer"], &path, body).await.0, 403, "a viewer is not in the policy's roles");
    let (path, body) = approve(p, hash(&by_admin));
    let (status, reply) = post(&app, &s["pm-two"], &path, body).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("content_hash")), "another content: {reply}");
    assert_eq!(footprint(&app).await, before, "refused reviews change nothing");
    // An admin's own API token is not another person.
    let (status, minted) =
        post(&app, &s["demo-admin"], "/api/v1/tokens", json!({"name": "second pair of eyes", "scope": "admin"})).await;
    assert_eq!(status, 201, "{minted}");
    let (path, body) = approve(a, hash(&by_admin));
    let (status, reply) = app.send(reqwest::Method::POST, &path, minted["token"].as_str(), body).await;
    assert_eq!(status, 403, "a token does not review: {reply}");
    let (status, reply) =
        app.send(reqwest::Method::POST, "/api/v1/changes", minted["token"].as_str(), proposal(41, 1)).await;
    assert_eq!(status, 403, "nor propose: {reply}");
    let before = footprint(&app).await;
    let (status, reply) =
        post(&app, &s["pm-two"], &format!("/api/v1/changes/{p}/reject"), json!({"content_hash": hash(&by_pm)})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("comment")), "a rejection says why: {reply}");
    assert_eq!(footprint(&app).await, before, "a refused review changes nothing");

    // A rejection ends the request: it can be neither approved nor applied.
    let (status, rejected) = post(
        &app,
        &s["demo-admin"],
        &format!("/api/v1/changes/{p}/reject"),
        json!({"content_hash": hash(&by_pm), "comment": "too much at once"}),
    )
    .await;
    assert_eq!((status, rejected["state"].as_str()), (200, Some("rejected")), "{rejected}");
    let (path, body) = approve(p, hash(&by_pm));
    let (status, reply) = post(&app, &s["pm-two"], &path, body).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "{reply}");
    assert_eq!(post(&app, &s["demo-pm"], &format!("/api/v1/changes/{p}/apply"), Value::Null).await.0, 409);
    let (_, listed) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/changes?state=rejected", Value::Null).await;
    let ids: Vec<i64> = listed["changes"].as_array().unwrap().iter().map(|c| c["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [p]);
    let (_, by_admin_list) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/changes?author=demo-admin", Value::Null).await;
    let authors: Vec<&str> =
        by_admin_list["changes"].as_array().unwrap().iter().map(|c| c["author"].as_str().unwrap()).collect();
    assert_eq!(authors, ["demo-admin"], "{by_admin_list}");
}

#[tokio::test]
async fn a_request_whose_pool_changed_after_it_was_made_is_suspended_not_applied() {
    // Arrange: an approved request, then the pool changes (an operator ejects a channel)
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(50, 1)).await;
    let id = request["id"].as_i64().unwrap();
    let (status, _) = post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": request["content_hash"]}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, reply) = post(
        &app,
        &s["demo-operator"],
        "/api/v1/pools/cn-pay/members/UNION_C/eject",
        json!({"reason": "acquirer down", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "break-glass stays immediate under a policy: {reply}");

    // Act
    let (status, reply) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;

    // Assert
    assert_eq!((status, reply["current_version"].as_i64()), (409, Some(2)), "{reply}");
    let (_, read) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, &format!("/api/v1/changes/{id}"), Value::Null).await;
    assert_eq!(read["state"], "suspended", "{read}");
    assert!(read["outcome"]["reason"].as_str().unwrap().contains("version 2"), "{read}");
    assert_eq!(read["outcome"]["changed_since"][0]["action"], "pool.eject", "what changed since: {read}");
    assert_eq!(read["outcome"]["changed_since"][0]["actor"], "demo-operator", "{read}");
    let (_, pool) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    assert_eq!(pool["snapshot"]["weights"][0]["weight"], 45, "the weights did not change");
    let suspended: i64 =
        sqlx::query_scalar("select count(*) from audit where entity = $1 and action = 'change.suspend'")
            .bind(format!("change:{id}"))
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(suspended, 1);
}

#[tokio::test]
async fn under_a_policy_every_configuration_write_of_the_pool_is_refused_and_break_glass_stays_immediate() {
    // Arrange
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, pool) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    let before = footprint(&app).await;

    // Act + Assert: every write of the pool's configuration names the policy, changes nothing
    let writes = [
        (reqwest::Method::PUT, "/api/v1/pools/cn-pay", json!({"snapshot": pool["snapshot"], "expected_version": 1})),
        (
            reqwest::Method::PUT,
            "/api/v1/pools/cn-pay/caps",
            json!({"caps": {"ALIPAY_A": 10}, "reason": "r", "expected_version": 1}),
        ),
        (
            reqwest::Method::PUT,
            "/api/v1/pools/cn-pay/peak_windows",
            json!({"peak_windows": [], "reason": "r", "expected_version": 1}),
        ),
        (
            reqwest::Method::POST,
            "/api/v1/pools/cn-pay/members",
            json!({"channel": "SHOPEE_U1", "reason": "r", "expected_version": 1}),
        ),
        (
            reqwest::Method::POST,
            "/api/v1/pools/cn-pay/restore",
            json!({"version": 1, "reason": "r", "expected_version": 1}),
        ),
    ];
    for (method, path, body) in writes {
        let (status, reply) = send(&app, &s["demo-admin"], method, path, body).await;
        assert_eq!((status, reply["field"].as_str()), (409, Some("policy")), "{path}: {reply}");
    }
    assert_eq!(footprint(&app).await, before, "refused writes change nothing");
    // Reducing risk stays immediate: an operator ejects, a rebuild follows.
    let (status, reply) = post(
        &app,
        &s["demo-operator"],
        "/api/v1/pools/cn-pay/members/UNION_C/eject",
        json!({"reason": "acquirer down", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) =
        post(&app, &s["demo-operator"], "/api/v1/pools/cn-pay/rebuild", json!({"reason": "now"})).await;
    assert_eq!(status, 200, "{reply}");

    // Both are flagged for an auditor; another person acknowledges each, once.
    let (_, open) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Value::Null)
            .await;
    let flags: Vec<(&str, &str, &str)> = open["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["action"].as_str().unwrap(), f["actor"].as_str().unwrap(), f["policy_scope"].as_str().unwrap()))
        .collect();
    assert_eq!(
        flags,
        [("pool.rebuild", "demo-operator", "pool:cn-pay"), ("pool.eject", "demo-operator", "pool:cn-pay")],
        "{open}"
    );
    let id = open["flags"][1]["id"].as_i64().unwrap();
    let path = format!("/api/v1/break-glass/{id}/acknowledge");
    let (status, _) = post(&app, &s["demo-operator"], &path, json!({"comment": "mine"})).await;
    assert_eq!(status, 403, "an operator does not acknowledge (nor its own)");
    let (status, acked) = post(&app, &s["demo-auditor"], &path, json!({"comment": "acquirer outage confirmed"})).await;
    assert_eq!((status, acked["acknowledged_by"].as_str()), (200, Some("demo-auditor")), "{acked}");
    let (status, _) = post(&app, &s["demo-auditor"], &path, json!({"comment": "again"})).await;
    assert_eq!(status, 409, "once");
    // A pool without a policy: ejecting there is not break-glass.
    let (status, reply) = post(
        &app,
        &s["demo-operator"],
        "/api/v1/pools/sea-pay/members/SHOPEE_U1/eject",
        json!({"reason": "acquirer down", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let (_, open) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Value::Null)
            .await;
    assert_eq!(open["flags"].as_array().unwrap().len(), 1, "only the rebuild waits: {open}");
    // Disabling a channel that cn-pay holds is flagged too, once per pool under a policy.
    let (status, reply) =
        post(&app, &s["demo-operator"], "/api/v1/channels/WECHAT_B/disable", json!({"reason": "acquirer down"})).await;
    assert_eq!(status, 200, "{reply}");
    let (_, open) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Value::Null)
            .await;
    assert_eq!(open["flags"][0]["action"], "channel.disable", "{open}");
    assert_eq!(open["flags"].as_array().unwrap().len(), 2, "{open}");
    let acks: i64 = sqlx::query_scalar("select count(*) from audit where action = 'break_glass.acknowledge'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(acks, 1);
}

#[tokio::test]
async fn a_policy_made_stricter_binds_requests_already_open_and_a_rejection_still_stops_an_approved_one() {
    // Arrange: a request under one approval; the policy then asks two
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(50, 1)).await;
    let id = request["id"].as_i64().unwrap();
    let hash = json!({"content_hash": request["content_hash"]});
    let (status, policy) = send(
        &app,
        &s["demo-admin"],
        reqwest::Method::PUT,
        "/api/v1/policies/pool:cn-pay",
        json!({"required_approvals": 2, "approver_roles": ["pm", "admin"], "expires_after_hours": 24,
               "reason": "two now", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{policy}");

    // Act + Assert: one approval is not enough any more; a second makes it approved
    let (_, one) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), hash.clone()).await;
    assert_eq!((one["state"].as_str(), one["approvals"].as_i64()), (Some("in_review"), Some(1)), "{one}");
    let (_, two) = post(&app, &s["demo-admin"], &format!("/api/v1/changes/{id}/approve"), hash.clone()).await;
    assert_eq!(two["state"], "approved", "{two}");
    // A reviewer who has not reviewed yet still stops it before it is applied.
    let mut rejection = hash.clone();
    rejection["comment"] = json!("not during the sale");
    let (status, _) = post(&app, &s["demo-operator"], &format!("/api/v1/changes/{id}/reject"), rejection.clone()).await;
    assert_eq!(status, 403, "an operator is not in the policy's roles");
    let (status, created) =
        post(&app, &s["demo-admin"], "/api/v1/users", json!({"name": "pm-three", "role": "pm"})).await;
    assert_eq!(status, 201, "{created}");
    let third = login(&app, "pm-three", created["password"].as_str().unwrap()).await;
    let (status, rejected) = post(&app, &third, &format!("/api/v1/changes/{id}/reject"), rejection).await;
    assert_eq!((status, rejected["state"].as_str()), (200, Some("rejected")), "{rejected}");
    assert_eq!(post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await.0, 409);
}

#[tokio::test]
async fn an_edit_voids_every_approval_and_the_new_content_is_reviewed_again() {
    // Arrange: an approved request
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(50, 1)).await;
    let id = request["id"].as_i64().unwrap();
    let old = json!({"content_hash": request["content_hash"]});
    let (_, approved) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), old.clone()).await;
    assert_eq!(approved["state"], "approved", "{approved}");

    // Act: someone else may not edit it; its author does
    let mut edit = proposal(55, 1);
    edit.as_object_mut().unwrap().remove("pool");
    let path = format!("/api/v1/changes/{id}");
    let (status, _) = send(&app, &s["pm-two"], reqwest::Method::PUT, &path, edit.clone()).await;
    assert_eq!(status, 403, "only the author edits");
    let (status, edited) = send(&app, &s["demo-pm"], reqwest::Method::PUT, &path, edit).await;

    // Assert: in review again, no approval counts, the old hash is refused, the new one taken
    assert_eq!(status, 200, "{edited}");
    assert_eq!((edited["state"].as_str(), edited["approvals"].as_i64()), (Some("in_review"), Some(0)), "{edited}");
    assert_ne!(edited["content_hash"], request["content_hash"]);
    let (status, reply) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), old).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("content_hash")), "{reply}");
    let new = json!({"content_hash": edited["content_hash"]});
    let (_, again) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), new).await;
    assert_eq!(again["state"], "approved", "{again}");
    // Back to the first content: still a new hash, the approvals given so far do not count.
    let mut back = proposal(50, 1);
    back.as_object_mut().unwrap().remove("pool");
    let (_, reverted) = send(&app, &s["demo-pm"], reqwest::Method::PUT, &path, back).await;
    assert_eq!(
        (reverted["state"].as_str(), reverted["approvals"].as_i64()),
        (Some("in_review"), Some(0)),
        "{reverted}"
    );
    assert_ne!(reverted["content_hash"], request["content_hash"]);
    let mut forward = proposal(55, 1);
    forward.as_object_mut().unwrap().remove("pool");
    let (_, edited) = send(&app, &s["demo-pm"], reqwest::Method::PUT, &path, forward).await;
    let (_, again) = post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": edited["content_hash"]}),
    )
    .await;
    assert_eq!(again["state"], "approved", "{again}");
    let (status, applied) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    assert_eq!(status, 200, "{applied}");
    let (_, pool) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    assert_eq!(pool["snapshot"]["weights"][0]["weight"], 55, "the edited weights apply");
}

#[tokio::test]
async fn a_scheduled_request_applies_at_its_time_and_one_whose_pool_moved_is_suspended_saying_why() {
    // Arrange: two approved requests, scheduled in an hour; the pool moves under the second
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let at = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut ids = Vec::new();
    for (pool, body) in [("cn-pay", proposal(50, 1))] {
        let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", body).await;
        let id = request["id"].as_i64().unwrap();
        post(
            &app,
            &s["pm-two"],
            &format!("/api/v1/changes/{id}/approve"),
            json!({"content_hash": request["content_hash"]}),
        )
        .await;
        let (status, scheduled) =
            post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/schedule"), json!({"at": at.to_rfc3339()})).await;
        assert_eq!((status, scheduled["state"].as_str()), (200, Some("scheduled")), "{pool}: {scheduled}");
        ids.push(id);
    }
    let (status, reply) = post(
        &app,
        &s["demo-pm"],
        &format!("/api/v1/changes/{}/schedule", ids[0]),
        json!({"at": "2001-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("at")), "the past: {reply}");

    // Act + Assert: nothing before its time; applied at it, in the name of who scheduled it
    let early = server::jobs::change_apply::run_once(&app.state, chrono::Utc::now()).await.unwrap();
    assert!(early.applied.is_empty() && early.refused.is_empty(), "{early:?}");
    let due = server::jobs::change_apply::run_once(&app.state, at + chrono::Duration::seconds(1)).await.unwrap();
    assert_eq!(due.applied, ids, "{due:?}");
    let (source, actor): (String, String) = sqlx::query_as(
        "select source, actor from audit where entity = 'pool:cn-pay' and action = 'pool.weights' order by id desc limit 1",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!((source.as_str(), actor.as_str()), ("schedule", "demo-pm"));

    // A second one, whose pool changes before its time, is suspended then, saying why.
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(60, 2)).await;
    let id = request["id"].as_i64().unwrap();
    post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": request["content_hash"]}),
    )
    .await;
    post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/schedule"), json!({"at": at.to_rfc3339()})).await;
    let (status, _) = post(
        &app,
        &s["demo-operator"],
        "/api/v1/pools/cn-pay/members/UNION_C/eject",
        json!({"reason": "acquirer down", "expected_version": 2}),
    )
    .await;
    assert_eq!(status, 200);
    let later = server::jobs::change_apply::run_once(&app.state, at + chrono::Duration::seconds(1)).await.unwrap();
    assert_eq!(later.refused.len(), 1, "{later:?}");
    let (_, read) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, &format!("/api/v1/changes/{id}"), Value::Null).await;
    assert_eq!(read["state"], "suspended", "{read}");
    assert!(read["outcome"]["reason"].as_str().unwrap().contains("version 3"), "{read}");

    // Requests nobody applied (the suspended one too) expire with their time, by the job,
    // and say so in the trail.
    let (_, open) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(61, 3)).await;
    let open_id = open["id"].as_i64().unwrap();
    let before_expiry = server::jobs::change_apply::run_once(&app.state, chrono::Utc::now()).await.unwrap();
    assert!(before_expiry.expired.is_empty(), "{before_expiry:?}");
    let expiry = chrono::Utc::now() + chrono::Duration::hours(73);
    let swept = server::jobs::change_apply::run_once(&app.state, expiry).await.unwrap();
    assert_eq!(swept.expired, [id, open_id], "the suspended one and the open one: {swept:?}");
    let (_, read) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, &format!("/api/v1/changes/{open_id}"), Value::Null).await;
    assert_eq!(read["state"], "expired", "{read}");
    let by: String = sqlx::query_scalar("select actor from audit where entity = $1 and action = 'change.expire'")
        .bind(format!("change:{open_id}"))
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(by, "change_apply");
}

#[tokio::test]
async fn a_change_that_moves_much_traffic_or_touches_a_heavy_member_needs_one_more_approval() {
    // Arrange: one approval, one more above 10 % moved or for a member above 40 %, for
    // every pool (the demo's own policy on cn-pay, which would win, is removed)
    let (app, s) = app().await;
    let removal = json!({"reason": "one policy for all pools", "expected_version": 1});
    let (status, refused) =
        send(&app, &s["demo-pm"], reqwest::Method::DELETE, "/api/v1/policies/pool:cn-pay", removal.clone()).await;
    assert_eq!(status, 403, "only those who manage access remove a policy: {refused}");
    let (status, _) =
        send(&app, &s["demo-admin"], reqwest::Method::DELETE, "/api/v1/policies/pool:cn-pay", removal.clone()).await;
    assert_eq!(status, 204);
    let (status, _) =
        send(&app, &s["demo-admin"], reqwest::Method::DELETE, "/api/v1/policies/pool:cn-pay", removal).await;
    assert_eq!(status, 404, "removed already");
    let removed: i64 = sqlx::query_scalar(
        "select count(*) from audit where entity = 'policy:pool:cn-pay' and action = 'policy.delete'",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!(removed, 1);
    let (_, open) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Value::Null)
            .await;
    assert_eq!(
        (open["flags"][0]["action"].as_str(), open["flags"][0]["entity"].as_str()),
        (Some("policy.delete"), Some("policy:pool:cn-pay")),
        "one person switching four-eyes off is for an auditor to acknowledge: {open}"
    );
    let stale = json!({"reason": "again", "expected_version": 7});
    let (status, _) = send(
        &app,
        &s["demo-admin"],
        reqwest::Method::PUT,
        "/api/v1/policies/pool:cn-pay",
        json!({"required_approvals": 1, "approver_roles": ["pm"], "expires_after_hours": 1, "reason": "back",
               "expected_version": 0}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) =
        send(&app, &s["demo-admin"], reqwest::Method::DELETE, "/api/v1/policies/pool:cn-pay", stale).await;
    assert_eq!(status, 409, "a stale version");
    let (status, _) = send(
        &app,
        &s["demo-admin"],
        reqwest::Method::DELETE,
        "/api/v1/policies/pool:cn-pay",
        json!({"reason": "for the risk rules", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 204);
    let (status, policy) = send(
        &app,
        &s["demo-admin"],
        reqwest::Method::PUT,
        "/api/v1/policies/pools",
        json!({"required_approvals": 1, "approver_roles": ["pm", "admin"], "expires_after_hours": 24,
               "moved_percent_over": 10, "member_share_over": 40, "reason": "risk rules", "expected_version": 0}),
    )
    .await;
    assert_eq!((status, policy["moved_percent_over"].as_f64()), (200, Some(10.0)), "{policy}");

    // Act: a small change of a light member, and a large one that also touches ALIPAY_A (45 %)
    let small = json!({"pool": "cn-pay", "operation": {"kind": "pool.weights", "weights": [{"member": "ALIPAY_A", "weight": 45},
        {"member": "WECHAT_B", "weight": 31}, {"member": "UNION_C", "weight": 25}], "mode": "drain"},
        "reason": "nudge", "expected_version": 1});
    let (_, light) = post(&app, &s["demo-pm"], "/api/v1/changes", small).await;
    let (_, heavy) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(5, 1)).await;

    // Assert
    assert_eq!((light["required_approvals"].as_i64(), light["diff"]["risk"].clone()), (Some(1), json!([])), "{light}");
    assert_eq!(heavy["required_approvals"], 2, "two rules met add one approval: {heavy}");
    let risk: Vec<&str> = heavy["diff"]["risk"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(risk.len(), 2, "{risk:?}");
    assert!(risk[0].contains("of the traffic, more than 10 %") && risk[1].contains("ALIPAY_A"), "{risk:?}");
    let id = heavy["id"].as_i64().unwrap();
    let (_, one) = post(
        &app,
        &s["pm-two"],
        &format!("/api/v1/changes/{id}/approve"),
        json!({"content_hash": heavy["content_hash"]}),
    )
    .await;
    assert_eq!(one["state"], "in_review", "one of two: {one}");
}

/// Submits `operation` on cn-pay made against `version`, has pm-two approve it and its
/// author apply it: the applied request.
async fn through(app: &TestApp, s: &HashMap<String, Session>, operation: Value, version: i64) -> Value {
    through_entity(app, s, "pool:cn-pay", operation, version).await
}

#[tokio::test]
async fn caps_windows_members_and_restores_go_through_requests_and_apply_as_the_direct_writes_would() {
    // Arrange: the policy refuses every direct write; a channel to add
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (status, _) = post(
        &app,
        &s["demo-admin"],
        "/api/v1/channels",
        json!({"code": "NEW_D", "name": "new acquirer", "base_weight": 10, "reason": "onboarding"}),
    )
    .await;
    assert_eq!(status, 201);
    let (put, post_) = (reqwest::Method::PUT, reqwest::Method::POST);
    for (method, path, body) in [
        (
            put.clone(),
            "/api/v1/pools/cn-pay/caps",
            json!({"caps": {"ALIPAY_A": 1000}, "reason": "x", "expected_version": 1}),
        ),
        (put, "/api/v1/pools/cn-pay/peak_windows", json!({"peak_windows": [], "reason": "x", "expected_version": 1})),
        (
            post_.clone(),
            "/api/v1/pools/cn-pay/members",
            json!({"channel": "NEW_D", "reason": "x", "expected_version": 1}),
        ),
        (post_, "/api/v1/pools/cn-pay/restore", json!({"version": 1, "reason": "x", "expected_version": 1})),
    ] {
        let (status, refused) = send(&app, &s["demo-pm"], method, path, body).await;
        assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{path}: {refused}");
    }

    // Act: caps, peak windows and a new member, each reviewed; then back to version 1
    let caps = through(&app, &s, json!({"kind": "pool.caps", "caps": {"ALIPAY_A": 1000}}), 1).await;
    let windows =
        json!({"kind": "pool.peak_windows", "peak_windows": [{"start": "19:00", "end": "23:00", "multiplier": 2}]});
    through(&app, &s, windows, 2).await;
    let added = through(&app, &s, json!({"kind": "pool.member_add", "channel": "NEW_D", "weight": 5}), 3).await;
    let (_, before_restore) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    let restored = through(&app, &s, json!({"kind": "pool.restore_version", "version": 1}), 4).await;

    // Assert: what reviewers saw, and what each apply wrote
    let changed: Vec<&str> =
        caps["diff"]["changes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(changed, ["caps"], "{caps}");
    assert_eq!(caps["diff"]["changes"][0]["after"]["ALIPAY_A"], 1000);
    assert_eq!(added["diff"]["preview"]["after"]["members"][3]["member"], "NEW_D", "{added}");
    assert_eq!(before_restore["snapshot"]["weights"][3], json!({"member": "NEW_D", "weight": 5}));
    assert_eq!(before_restore["snapshot"]["peak_windows"][0]["multiplier"], 2, "{before_restore}");
    assert_eq!(before_restore["snapshot"]["caps"]["ALIPAY_A"], 1000, "{before_restore}");
    let undone: Vec<i64> =
        restored["diff"]["undoes"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(undone, [2, 3, 4], "{restored}");
    let (_, history) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay/versions", Value::Null).await;
    assert_eq!(history["version"], 5, "{history}");
    let body_of = |v: i64| {
        history["versions"].as_array().unwrap().iter().find(|h| h["version"] == v).unwrap()["snapshot"].clone()
    };
    assert_eq!(body_of(5), body_of(1), "the restore equals version 1");
    let (_, audit) =
        send(&app, &s["demo-auditor"], reqwest::Method::GET, "/api/v1/audit?entity=pool:cn-pay&limit=10", Value::Null)
            .await;
    let actions: Vec<&str> = audit["rows"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    for action in ["pool.caps", "pool.peak_windows", "pool.member_add", "pool.restore_version"] {
        assert!(actions.contains(&action), "{action} in {actions:?}");
    }
}

#[tokio::test]
async fn a_request_to_restore_a_version_naming_a_disabled_channel_is_refused_and_changes_nothing() {
    // Arrange: version 2 holds NEW_D; version 3 drops it again; NEW_D is then disabled
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let channel = json!({"code": "NEW_D", "name": "new acquirer", "base_weight": 10, "reason": "onboarding"});
    assert_eq!(post(&app, &s["demo-admin"], "/api/v1/channels", channel).await.0, 201);
    let added = through(&app, &s, json!({"kind": "pool.member_add", "channel": "NEW_D"}), 1).await;
    assert_eq!(added["operation"]["weight"], 10, "the default weight reviewers saw is written out: {added}");
    let weights = json!({"kind": "pool.weights", "mode": "drain", "weights": [{"member": "ALIPAY_A", "weight": 45},
        {"member": "WECHAT_B", "weight": 30}, {"member": "UNION_C", "weight": 25}]});
    through(&app, &s, weights, 2).await;
    let (status, _) =
        post(&app, &s["demo-operator"], "/api/v1/channels/NEW_D/disable", json!({"reason": "acquirer down"})).await;
    assert_eq!(status, 200);
    let before = footprint(&app).await;

    // Act
    let body = json!({"pool": "cn-pay", "operation": {"kind": "pool.restore_version", "version": 2},
        "reason": "back", "expected_version": 3});
    let (status, refused) = post(&app, &s["demo-pm"], "/api/v1/changes", body).await;
    let unknown = json!({"pool": "cn-pay", "operation": {"kind": "pool.restore_version", "version": 99},
        "reason": "back", "expected_version": 3});
    let (status_unknown, _) = post(&app, &s["demo-pm"], "/api/v1/changes", unknown).await;

    // Assert
    assert_eq!((status, refused["field"].as_str()), (422, Some("version")), "{refused}");
    assert!(refused["rule"].as_str().unwrap().contains("NEW_D"), "{refused}");
    assert_eq!(status_unknown, 404);
    assert_eq!(footprint(&app).await, before, "a refused request leaves nothing behind");
}

#[tokio::test]
async fn an_approval_by_someone_since_given_another_role_no_longer_counts_when_applying() {
    // Arrange: pm-two approves; an admin then makes pm-two a viewer
    let (app, s) = app().await;
    cn_pay_policy(&app, &s["demo-admin"]).await;
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", proposal(50, 1)).await;
    let id = request["id"].as_i64().unwrap();
    let hash = json!({"content_hash": request["content_hash"]});
    let (_, approved) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), hash).await;
    assert_eq!(approved["state"], "approved", "{approved}");
    let (status, _) =
        send(&app, &s["demo-admin"], reqwest::Method::PUT, "/api/v1/users/pm-two/role", json!({"role": "viewer"}))
            .await;
    assert_eq!(status, 200);

    // Act
    let (status, refused) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;

    // Assert: in review again, saying why; the pool did not change
    assert_eq!((status, refused["field"].as_str()), (409, Some("state")), "{refused}");
    assert!(refused["rule"].as_str().unwrap().contains("0 of its 1 still stand"), "{refused}");
    let (_, read) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, &format!("/api/v1/changes/{id}"), Value::Null).await;
    assert_eq!(read["state"], "in_review", "{read}");
    let (_, pool) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/pools/cn-pay", Value::Null).await;
    assert_eq!((pool["version"].as_i64(), pool["snapshot"]["weights"][0]["weight"].as_i64()), (Some(1), Some(45)));
}

/// Submits `operation` on `entity` made against `version`, has pm-two approve it and its
/// author apply it: the applied request.
async fn through_entity(
    app: &TestApp,
    s: &HashMap<String, Session>,
    entity: &str,
    operation: Value,
    version: i64,
) -> Value {
    let body =
        json!({"entity": entity, "operation": operation, "reason": "reviewed change", "expected_version": version});
    let (status, request) = post(app, &s["demo-pm"], "/api/v1/changes", body).await;
    assert_eq!(status, 201, "{request}");
    let id = request["id"].as_i64().unwrap();
    let hash = json!({"content_hash": request["content_hash"]});
    let (status, approved) = post(app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), hash).await;
    assert_eq!((status, approved["state"].as_str()), (200, Some("approved")), "{approved}");
    let (status, applied) = post(app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    assert_eq!((status, applied["state"].as_str()), (200, Some("applied")), "{applied}");
    applied
}

#[tokio::test]
async fn channels_plans_and_tenants_under_a_policy_change_only_through_reviewed_requests() {
    // Arrange: policies on channels, plans and tenants
    let (app, s) = app().await;
    for scope in ["channels", "plans", "tenants"] {
        let (status, policy) = send(
            &app,
            &s["demo-admin"],
            reqwest::Method::PUT,
            &format!("/api/v1/policies/{scope}"),
            json!({"required_approvals": 1, "approver_roles": ["pm", "admin"], "expires_after_hours": 24,
                   "reason": "four eyes", "expected_version": 0}),
        )
        .await;
        assert_eq!(status, 200, "{scope}: {policy}");
    }
    let (_, acme) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    let acme_version = acme["version"].as_i64().unwrap();
    let before = footprint(&app).await;

    // Act + Assert: direct writes name the policy and change nothing
    let writes = [
        ("/api/v1/channels/WECHAT_B", json!({"name": "WeChat", "base_weight": 31, "expected_version": 1})),
        (
            "/api/v1/plans/pro",
            json!({"monthly_tokens": 1, "daily_requests": 1, "concurrency": 1, "expected_version": 1}),
        ),
        ("/api/v1/tenants/acme", json!({"plan": "enterprise", "expected_version": acme_version})),
    ];
    for (path, body) in writes {
        let (status, refused) = send(&app, &s["demo-admin"], reqwest::Method::PUT, path, body).await;
        assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{path}: {refused}");
    }
    let (status, refused) = post(
        &app,
        &s["demo-admin"],
        "/api/v1/channels",
        json!({"code": "NEW_D", "name": "new acquirer", "base_weight": 10}),
    )
    .await;
    assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{refused}");
    let mismatched = json!({"entity": "plan:pro", "operation": {"kind": "tenant.put", "plan": "pro"},
        "reason": "r", "expected_version": 1});
    let (status, refused) = post(&app, &s["demo-pm"], "/api/v1/changes", mismatched).await;
    assert_eq!((status, refused["field"].as_str()), (422, Some("operation")), "{refused}");
    let invalid = json!({"entity": "tenant:acme", "operation": {"kind": "tenant.put", "plan": "nope"},
        "reason": "r", "expected_version": acme_version});
    let (status, refused) = post(&app, &s["demo-pm"], "/api/v1/changes", invalid).await;
    assert_eq!((status, refused["field"].as_str()), (422, Some("plan")), "checked as the direct write: {refused}");
    let both = json!({"pool": "cn-pay", "entity": "plan:pro", "operation": {"kind": "plan.restore_version", "version": 1},
        "reason": "r", "expected_version": 1});
    assert_eq!(post(&app, &s["demo-pm"], "/api/v1/changes", both).await.0, 400, "pool and entity both");
    let negative = json!({"entity": "plan:pro", "operation": {"kind": "plan.restore_version", "version": -9},
        "reason": "r", "expected_version": 1});
    let (status, refused) = post(&app, &s["demo-pm"], "/api/v1/changes", negative).await;
    assert_eq!((status, refused["field"].as_str()), (400, Some("version")), "{refused}");
    // A request proposed changes nothing until it is applied.
    let pending = json!({"entity": "plan:pro", "operation": {"kind": "plan.update", "monthly_tokens": 1,
        "daily_requests": 1, "concurrency": 1}, "reason": "r", "expected_version": 1});
    let (status, pending) = post(&app, &s["demo-pm"], "/api/v1/changes", pending).await;
    assert_eq!(status, 201, "{pending}");
    let cancel = json!({"reason": "only to show it changes nothing"});
    post(&app, &s["demo-pm"], &format!("/api/v1/changes/{}/cancel", pending["id"]), cancel).await;
    // Only the request and its own audit rows (submit, cancel) are new.
    let (after, expected) = (footprint(&app).await, before.clone());
    let (_, pro) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/plans/pro", Value::Null).await;
    assert_eq!((pro["version"].as_i64(), pro["monthly_tokens"].as_i64()), (Some(1), Some(50_000_000)), "{pro}");
    assert_eq!(after[5], expected[5] + 1, "one request more");
    assert_eq!(
        (after[8], after[9], after[10], after[11], after[12]),
        (expected[8], expected[9], expected[10], expected[11], expected[12])
    );

    // Reviewed requests apply: a plan's limits, a tenant's plan, a new channel
    let plan =
        json!({"kind": "plan.update", "monthly_tokens": 60_000_000, "daily_requests": 100_000, "concurrency": 64});
    let raised = through_entity(&app, &s, "plan:pro", plan, 1).await;
    // The plan's change republished acme: the tenant's request is made against its version now.
    let (_, acme) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    assert_eq!(acme["version"].as_i64(), Some(acme_version + 1), "{acme}");
    let to_enterprise = json!({"kind": "tenant.put", "plan": "enterprise"});
    let moved = through_entity(&app, &s, "tenant:acme", to_enterprise, acme_version + 1).await;
    let channel = json!({"kind": "channel.create", "name": "new acquirer", "base_weight": 10});
    through_entity(&app, &s, "channel:NEW_D", channel, 0).await;

    let fields: Vec<&str> =
        raised["diff"]["changes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["monthly_tokens"], "{raised}");
    assert_eq!(raised["diff"]["changes"][0]["after"], 60_000_000);
    let (_, pro) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/plans/pro", Value::Null).await;
    assert_eq!((pro["monthly_tokens"].as_i64(), pro["version"].as_i64()), (Some(60_000_000), Some(2)), "{pro}");
    assert!(moved["diff"]["changes"].as_array().unwrap().iter().any(|c| c["field"] == "monthly_tokens"), "{moved}");
    let (_, acme) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    assert_eq!(acme["plan"], "enterprise", "{acme}");
    let usage = app.state.quotas.usage(&client::quota::TenantId::parse("acme").unwrap()).await.unwrap();
    assert_eq!(usage.buckets.last().unwrap().amount, 500_000_000, "Redis has the enterprise limit: {usage:?}");
    let (status, _) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/channels/NEW_D", Value::Null).await;
    assert_eq!(status, 200);
    let (actor, reason): (String, String) = sqlx::query_as(
        "select actor, reason from audit where entity = 'plan:pro' and action = 'plan.update' order by id desc limit 1",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!(actor, "demo-pm", "applied by its author");
    assert!(reason.starts_with("change request "), "{reason}");

    // Disabling a channel stays immediate (it reduces risk), flagged for an auditor.
    let (status, _) =
        post(&app, &s["demo-operator"], "/api/v1/channels/NEW_D/disable", json!({"reason": "not live yet"})).await;
    assert_eq!(status, 200);
    let (_, open) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Value::Null)
            .await;
    let flag = (open["flags"][0]["entity"].as_str(), open["flags"][0]["policy_scope"].as_str());
    assert_eq!(flag, (Some("channel:NEW_D"), Some("channels")), "{open}");
    // The list filters by entity.
    let (_, listed) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/changes?entity=plan:pro", Value::Null).await;
    let entities: Vec<&str> =
        listed["changes"].as_array().unwrap().iter().map(|c| c["entity"].as_str().unwrap()).collect();
    assert_eq!(entities, ["plan:pro", "plan:pro"], "the cancelled one and the applied one: {listed}");
}

#[tokio::test]
async fn a_tenant_request_whose_tenant_moved_is_suspended_and_a_plan_restore_applies_by_request() {
    // Arrange: a policy on tenants and plans; an approved tenant request; then a grant (a
    // direct write) moves the tenant on
    let (app, s) = app().await;
    for scope in ["tenants", "plans"] {
        let policy = json!({"required_approvals": 1, "approver_roles": ["pm", "admin"], "expires_after_hours": 24,
            "reason": "four eyes", "expected_version": 0});
        let path = format!("/api/v1/policies/{scope}");
        assert_eq!(send(&app, &s["demo-admin"], reqwest::Method::PUT, &path, policy).await.0, 200);
    }
    let (_, acme) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    let version = acme["version"].as_i64().unwrap();
    let body = json!({"entity": "tenant:acme", "operation": {"kind": "tenant.put", "plan": "starter"},
        "reason": "downgrade", "expected_version": version});
    let (_, request) = post(&app, &s["demo-pm"], "/api/v1/changes", body).await;
    let id = request["id"].as_i64().unwrap();
    let hash = json!({"content_hash": request["content_hash"]});
    let (_, approved) = post(&app, &s["pm-two"], &format!("/api/v1/changes/{id}/approve"), hash).await;
    assert_eq!(approved["state"], "approved", "{approved}");
    let grant = json!({"id": "promo", "kind": "bonus", "amount": 1000, "reason": "promo"});
    assert_eq!(post(&app, &s["demo-pm"], "/api/v1/tenants/acme/grants", grant).await.0, 201);

    // Act
    let (status, refused) = post(&app, &s["demo-pm"], &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    let plan = json!({"kind": "plan.update", "monthly_tokens": 7, "daily_requests": 7, "concurrency": 7});
    through_entity(&app, &s, "plan:starter", plan, 1).await;
    let restored =
        through_entity(&app, &s, "plan:starter", json!({"kind": "plan.restore_version", "version": 1}), 2).await;

    // Assert
    assert_eq!((status, refused["current_version"].as_i64()), (409, Some(version + 1)), "{refused}");
    let (_, read) =
        send(&app, &s["demo-viewer"], reqwest::Method::GET, &format!("/api/v1/changes/{id}"), Value::Null).await;
    assert_eq!(read["state"], "suspended", "{read}");
    let (_, acme) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/tenants/acme", Value::Null).await;
    assert_eq!(acme["plan"], "pro", "the suspended request changed nothing: {acme}");
    assert_eq!(restored["outcome"]["version"], 3, "{restored}");
    let (_, starter) = send(&app, &s["demo-viewer"], reqwest::Method::GET, "/api/v1/plans/starter", Value::Null).await;
    assert_eq!(starter["monthly_tokens"], 5_000_000, "{starter}");
    let reason: String = sqlx::query_scalar(
        "select reason from audit where entity = 'plan:starter' and action = 'plan.restore_version'",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert!(reason.contains("restores version 1"), "{reason}");
}

/// The states the database's check constraints allow are exactly those of the enums the
/// server binds and the API and the UI name (one definition; the migration can only
/// repeat it, so this holds them together).
#[tokio::test]
async fn the_states_the_database_allows_are_the_states_the_api_names() {
    use api::changes::ChangeState;
    use api::ramps::RampState;
    let app = integration::spawn_app().await;
    for (constraint, names) in [
        ("ramp_state_check", RampState::names(&RampState::ALL)),
        ("change_request_state_check", ChangeState::names(&ChangeState::ALL)),
    ] {
        let definition: String =
            sqlx::query_scalar("select pg_get_constraintdef(oid) from pg_constraint where conname = $1")
                .bind(constraint)
                .fetch_one(&app.state.db)
                .await
                .unwrap_or_else(|e| panic!("{constraint}: {e}"));
        let allowed: std::collections::BTreeSet<&str> = definition.split('\'').skip(1).step_by(2).collect();
        assert_eq!(allowed, names.into_iter().collect(), "{constraint}: {definition}");
    }
}
