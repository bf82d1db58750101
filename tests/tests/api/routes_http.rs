//! Routes over HTTP against a running server: rules on a request's attributes choose the
//! pool its draw comes from; invalid routes are refused naming the field and change
//! nothing; a route change is one audited, versioned, published change (and, under the
//! `routes` approval policy, goes through a reviewed change request).

use std::collections::HashMap;

use integration::ui::Session;
use integration::{spawn_app, spawn_app_with, TestApp};
use serde_json::{json, Value};

async fn put(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    app.send(reqwest::Method::PUT, path, None, body).await
}

/// Channels A..D and three pools: `small-pay` (A), `big-pay` (B), `general` (C and D).
async fn three_pools(app: &TestApp) {
    for code in ["A", "B", "C", "D"] {
        let (status, body) =
            app.post_json("/api/v1/channels", json!({"code": code, "name": code, "base_weight": 1})).await;
        assert_eq!(status, 201, "{body}");
    }
    for (pool, members) in [("small-pay", vec!["A"]), ("big-pay", vec!["B"]), ("general", vec!["C", "D"])] {
        let weights: Vec<Value> = members.iter().map(|m| json!({"member": m, "weight": 1})).collect();
        let snapshot = json!({"weights": weights, "batch_size": 20, "low_water": 5, "ordering": "smooth",
            "timezone": "UTC", "eject_rebuild_percent": 50});
        let (status, body) =
            put(app, &format!("/api/v1/pools/{pool}"), json!({"snapshot": snapshot, "expected_version": 0})).await;
        assert_eq!(status, 200, "{pool}: {body}");
    }
}

fn checkout_rules() -> Value {
    json!([
        {"name": "small", "when": {"amount": {"lt": "1000"}}, "pool": "small-pay"},
        {"name": "big-usd", "when": {"amount": {"gte": 1000, "lte": "50000"}, "currency": {"in": ["usd", "EUR"]}}, "pool": "big-pay"},
        {"name": "sg-cards", "when": {"country": {"equals": "SG"}, "method": {"prefix": "card"}}, "pool": "small-pay"}
    ])
}

async fn create_checkout(app: &TestApp) -> Value {
    let body = json!({"rules": checkout_rules(), "default_pool": "general", "expected_version": 0,
        "reason": "route checkout by amount"});
    let (status, reply) = put(app, "/api/v1/routes/checkout", body).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

async fn evaluate(app: &TestApp, attributes: Value) -> (u16, Value) {
    app.post_json("/api/v1/routes/checkout/evaluate", json!({"attributes": attributes})).await
}

#[tokio::test]
async fn amounts_on_both_sides_of_each_boundary_and_string_attributes_choose_the_rule_s_pool() {
    // Arrange
    let app = spawn_app().await;
    three_pools(&app).await;
    let reply = create_checkout(&app).await;
    assert_eq!((reply["version"].as_i64(), reply["published"].as_bool()), (Some(1), Some(true)), "{reply}");

    // Act + Assert: each boundary from both sides
    let cases = [
        (json!({"amount": "999.99", "currency": "USD"}), Some("small"), "small-pay"),
        (json!({"amount": 999.99}), Some("small"), "small-pay"),
        (json!({"amount": 1000, "currency": "USD"}), Some("big-usd"), "big-pay"),
        (json!({"amount": "1000.00", "currency": "eur"}), Some("big-usd"), "big-pay"),
        (json!({"amount": "50000", "currency": "USD"}), Some("big-usd"), "big-pay"),
        (json!({"amount": "50000.01", "currency": "USD"}), None, "general"),
        (json!({"amount": 1000, "currency": "GBP"}), None, "general"),
        (json!({"amount": 5000, "country": "sg", "method": "card_visa"}), Some("sg-cards"), "small-pay"),
        (json!({"amount": 5000, "country": "SG", "method": "wallet"}), None, "general"),
        // Attributes no rule names are ignored; none at all is the default.
        (json!({"amount": 10, "campaign": "black-friday", "merchant": 42}), Some("small"), "small-pay"),
        (json!({}), None, "general"),
    ];
    for (attributes, rule, pool) in cases {
        let (status, decided) = evaluate(&app, attributes.clone()).await;
        assert_eq!(status, 200, "{attributes}: {decided}");
        assert_eq!((decided["rule"].as_str(), decided["pool"].as_str()), (rule, Some(pool)), "{attributes}: {decided}");
        assert_eq!(decided["route_version"], 1, "{decided}");
    }

    // Draws over HTTP land in the chosen pool and say which rule chose it.
    let members: HashMap<&str, Vec<&str>> =
        HashMap::from([("small-pay", vec!["A"]), ("big-pay", vec!["B"]), ("general", vec!["C", "D"])]);
    for (attributes, rule, pool) in [
        (json!({"amount": 12.5}), Some("small"), "small-pay"),
        (json!({"amount": 2500, "currency": "USD"}), Some("big-usd"), "big-pay"),
        (json!({"amount": 2500, "currency": "JPY"}), None, "general"),
    ] {
        for _ in 0..5 {
            let (status, drawn) =
                app.post_json("/api/v1/routes/checkout/draw", json!({"attributes": attributes})).await;
            assert_eq!(status, 200, "{drawn}");
            assert_eq!((drawn["rule"].as_str(), drawn["pool"].as_str()), (rule, Some(pool)), "{drawn}");
            assert!(members[pool].contains(&drawn["member"].as_str().unwrap()), "{drawn}");
            assert_eq!((drawn["source"].as_str(), drawn["version"].as_u64()), (Some("redis"), Some(1)), "{drawn}");
        }
    }
    // A sticky draw keeps its member; no body at all draws from the default pool.
    let sticky = json!({"attributes": {"amount": 1}, "sticky_key": "user-42"});
    let (status, first) = app.post_json("/api/v1/routes/checkout/draw", sticky.clone()).await;
    assert_eq!((status, first["member"].as_str()), (200, Some("A")), "{first}");
    let (status, bare) = app.post_json("/api/v1/routes/checkout/draw", Value::Null).await;
    assert_eq!((status, bare["pool"].as_str(), bare["rule"].as_str()), (200, Some("general"), None), "{bare}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"tessera_route_decisions_total{pool="big-pay",route="checkout",rule="big-usd"} 5"#),
        "{metrics}"
    );

    // Bad attributes are refused naming the attribute; an unknown route is 404.
    for (attributes, field) in [
        (json!({"amount": "12,50"}), "attributes.amount"),
        (json!({"currency": "dollars"}), "attributes.currency"),
        (json!({"Country": "SG"}), "attributes.Country"),
        (json!({"merchant": {"id": 1}}), "attributes.merchant"),
        (json!([1, 2]), "attributes"),
    ] {
        let (status, refused) = evaluate(&app, attributes.clone()).await;
        assert_eq!((status, refused["field"].as_str()), (400, Some(field)), "{attributes}: {refused}");
        let (status, refused) = app.post_json("/api/v1/routes/checkout/draw", json!({"attributes": attributes})).await;
        assert_eq!((status, refused["field"].as_str()), (400, Some(field)), "draw: {refused}");
    }
    assert_eq!(app.post_json("/api/v1/routes/elsewhere/draw", Value::Null).await.0, 404);
    assert_eq!(app.post_json("/api/v1/routes/bad%7Bname/draw", Value::Null).await.0, 400);
}

#[tokio::test]
async fn an_invalid_route_is_refused_naming_the_field_and_changes_nothing() {
    // Arrange
    let app = spawn_app().await;
    three_pools(&app).await;
    let audit_rows =
        || async { sqlx::query_scalar::<_, i64>("select count(*) from audit").fetch_one(&app.state.db).await.unwrap() };
    let before = audit_rows().await;

    // Act + Assert
    let cases = [
        (
            json!([{"when": {"amount": {"gte": 5000, "lt": "1000"}}, "pool": "big-pay"}]),
            "general",
            422,
            "rules[0].when.amount",
        ),
        (json!([{"when": {"amount": {"gte": "ten"}}, "pool": "big-pay"}]), "general", 422, "rules[0].when.amount.gte"),
        (
            json!([{"when": {"currency": {"in": ["US"]}}, "pool": "big-pay"}]),
            "general",
            422,
            "rules[0].when.currency.in[0]",
        ),
        (
            json!([{"when": {"amount": {"equals": "5"}}, "pool": "big-pay"}]),
            "general",
            422,
            "rules[0].when.amount.equals",
        ),
        (
            json!([{"when": {}, "pool": "big-pay"}, {"when": {"m": {"equals": "x"}}, "pool": "general"}]),
            "general",
            422,
            "rules[1]",
        ),
        (json!([{"when": {"amount": {"gt": 1}}, "pool": "nowhere"}]), "general", 422, "rules[0].pool"),
        (json!([]), "nowhere", 422, "default_pool"),
        (
            json!([{"name": "x", "when": {}, "pool": "big-pay"}, {"name": "x", "when": {}, "pool": "general"}]),
            "general",
            422,
            "rules[1]",
        ),
    ];
    for (rules, default_pool, status, field) in cases {
        let body = json!({"rules": rules, "default_pool": default_pool, "expected_version": 0, "reason": "try"});
        let (got, refused) = put(&app, "/api/v1/routes/checkout", body).await;
        assert_eq!((got, refused["field"].as_str()), (status, Some(field)), "{rules}: {refused}");
    }
    let (status, refused) =
        put(&app, "/api/v1/routes/checkout", json!({"rules": [], "expected_version": 0, "reason": "r"})).await;
    assert_eq!(status, 400, "default_pool missing: {refused}");
    let (status, refused) =
        put(&app, "/api/v1/routes/checkout", json!({"rules": [], "default_pool": "general", "expected_version": 0}))
            .await;
    assert_eq!((status, refused["field"].as_str()), (400, Some("reason")), "{refused}");
    assert_eq!(app.get_json("/api/v1/routes/checkout").await.0, 404, "nothing was written");
    assert_eq!(audit_rows().await, before, "no audit row either");
    let (_, list) = app.get_json("/api/v1/routes").await;
    assert_eq!(list["routes"], json!([]), "{list}");
}

#[tokio::test]
async fn a_route_change_is_audited_versioned_and_published_atomically_and_a_restore_rolls_forward() {
    // Arrange
    let app = spawn_app().await;
    three_pools(&app).await;
    create_checkout(&app).await;
    let name = client::route::RouteName::parse("checkout").unwrap();

    // Act: a second version sends everything small to big-pay
    let v2 = json!({"rules": [{"name": "everything", "when": {}, "pool": "big-pay"}], "default_pool": "general",
        "expected_version": 1, "reason": "all traffic to the big acquirer"});
    let (status, reply) = put(&app, "/api/v1/routes/checkout", v2.clone()).await;
    assert_eq!((status, reply["version"].as_i64()), (200, Some(2)), "{reply}");

    // Assert: the audit row holds both versions; Redis holds version 2, whole
    let (actor, before, after, reason): (String, Value, Value, String) = sqlx::query_as(
        "select actor, before, after, reason from audit where entity = 'route:checkout' and action = 'route.put' order by id desc limit 1",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert_eq!(reason, "all traffic to the big acquirer");
    assert!(!actor.is_empty());
    assert_eq!(before["rules"][0]["name"], "small", "{before}");
    assert_eq!(after["rules"], json!([{"name": "everything", "when": {}, "pool": "big-pay"}]), "{after}");
    assert_eq!(app.state.route_admin.version(&name).await.unwrap(), Some(2));
    let (_, detail) = app.get_json("/api/v1/routes/checkout").await;
    assert_eq!(
        (detail["version"].as_i64(), detail["described"][0].as_str()),
        (Some(2), Some("every request")),
        "{detail}"
    );
    let (_, decided) = evaluate(&app, json!({"amount": 5})).await;
    assert_eq!(
        (decided["rule"].as_str(), decided["route_version"].as_u64()),
        (Some("everything"), Some(2)),
        "{decided}"
    );
    let (status, verified) = app.get_json("/api/v1/audit/verify").await;
    assert_eq!((status, verified["intact"].as_bool()), (200, Some(true)), "{verified}");

    // A stale version is refused, saying the current one; nothing changes.
    let (status, stale) = put(
        &app,
        "/api/v1/routes/checkout",
        json!({"rules": [], "default_pool": "general",
        "expected_version": 1, "reason": "late"}),
    )
    .await;
    assert_eq!((status, stale["current_version"].as_i64()), (409, Some(2)), "{stale}");

    // A restore of version 1 is version 3, equal to version 1.
    let (status, restored) = app
        .post_json("/api/v1/routes/checkout/restore", json!({"version": 1, "reason": "back", "expected_version": 2}))
        .await;
    assert_eq!((status, restored["version"].as_i64()), (200, Some(3)), "{restored}");
    let (_, history) = app.get_json("/api/v1/routes/checkout/versions").await;
    let versions: Vec<(i64, &str)> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_i64().unwrap(), v["action"].as_str().unwrap()))
        .collect();
    assert_eq!(versions, [(3, "route.restore_version"), (2, "route.put"), (1, "route.put")], "{history}");
    assert_eq!(history["versions"][0]["route"], history["versions"][2]["route"]);
    let (_, decided) = evaluate(&app, json!({"amount": 5})).await;
    assert_eq!((decided["rule"].as_str(), decided["route_version"].as_u64()), (Some("small"), Some(3)), "{decided}");
    let (status, refused) = app
        .post_json("/api/v1/routes/checkout/restore", json!({"version": 3, "reason": "no-op", "expected_version": 3}))
        .await;
    assert_eq!((status, refused["field"].as_str()), (422, Some("version")), "{refused}");
    assert_eq!(
        app.post_json("/api/v1/routes/checkout/restore", json!({"version": 9, "reason": "r", "expected_version": 3}))
            .await
            .0,
        404
    );

    // Redis lost the route: reconcile publishes it again, and this instance kept deciding.
    let mut conn = app.state.redis.connection().await.unwrap();
    let _: () = redis::cmd("DEL").arg(app.state.keys.route_meta("checkout")).query_async(&mut conn).await.unwrap();
    let (status, decided) = evaluate(&app, json!({"amount": 5})).await;
    assert_eq!((status, decided["pool"].as_str()), (200, Some("small-pay")), "{decided}");
    let reconciled = server::publish::reconcile(&app.state).await.unwrap();
    assert!(reconciled.published.contains(&"route:checkout v3".to_owned()), "{reconciled:?}");
    assert_eq!(app.state.route_admin.version(&name).await.unwrap(), Some(3));
}

#[tokio::test]
async fn under_the_routes_policy_a_route_changes_only_through_a_reviewed_change_request() {
    // Arrange: access control on, the demo data, a second pm and a policy on routes
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let report = integration::seed_demo(&app).await;
    let passwords: HashMap<String, String> = report.users.into_iter().map(|(name, _, p)| (name, p)).collect();
    let pm = Session::sign_in(&app, "demo-pm", &passwords["demo-pm"]).await;
    let admin = Session::sign_in(&app, "demo-admin", &passwords["demo-admin"]).await;
    let (status, created) =
        admin.send(&app, reqwest::Method::POST, "/api/v1/users", json!({"name": "pm-two", "role": "pm"})).await;
    assert_eq!(status, 201, "{created}");
    let pm_two = Session::sign_in(&app, "pm-two", created["password"].as_str().unwrap()).await;
    let route = json!({"rules": [{"name": "big", "when": {"amount": {"gte": 1000}}, "pool": "sea-pay"}], "default_pool": "cn-pay"});
    let mut direct = route.clone();
    direct["expected_version"] = json!(0);
    direct["reason"] = json!("before the policy");
    let (status, reply) = pm.send(&app, reqwest::Method::PUT, "/api/v1/routes/checkout", direct).await;
    assert_eq!(status, 200, "{reply}");
    let (status, policy) = admin
        .send(
            &app,
            reqwest::Method::PUT,
            "/api/v1/policies/routes",
            json!({"required_approvals": 1,
            "approver_roles": ["pm", "admin"], "expires_after_hours": 24, "reason": "four eyes on routing",
            "expected_version": 0}),
        )
        .await;
    assert_eq!(status, 200, "{policy}");

    // Act + Assert: a direct write names the policy and changes nothing
    let changed = json!({"rules": [], "default_pool": "sea-pay", "expected_version": 1, "reason": "direct"});
    let (status, refused) = pm.send(&app, reqwest::Method::PUT, "/api/v1/routes/checkout", changed).await;
    assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{refused}");
    let (status, refused) = pm
        .send(
            &app,
            reqwest::Method::POST,
            "/api/v1/routes/checkout/restore",
            json!({"version": 1, "reason": "r", "expected_version": 1}),
        )
        .await;
    assert_eq!((status, refused["field"].as_str()), (409, Some("policy")), "{refused}");

    // The same change as a request: reviewed by another pm, applied, published.
    let body = json!({"entity": "route:checkout", "operation": {"kind": "route.put", "rules": [], "default_pool": "sea-pay"},
        "reason": "everything to sea-pay", "expected_version": 1});
    let (status, request) = pm.send(&app, reqwest::Method::POST, "/api/v1/changes", body).await;
    assert_eq!(status, 201, "{request}");
    assert_eq!(request["diff"]["before"]["default_pool"], "cn-pay", "{request}");
    assert_eq!(request["diff"]["after"]["default_pool"], "sea-pay", "{request}");
    let id = request["id"].as_i64().unwrap();
    let (status, own) = pm
        .send(
            &app,
            reqwest::Method::POST,
            &format!("/api/v1/changes/{id}/approve"),
            json!({"content_hash": request["content_hash"]}),
        )
        .await;
    assert_eq!(status, 403, "nobody approves their own request: {own}");
    let (status, approved) = pm_two
        .send(
            &app,
            reqwest::Method::POST,
            &format!("/api/v1/changes/{id}/approve"),
            json!({"content_hash": request["content_hash"]}),
        )
        .await;
    assert_eq!((status, approved["state"].as_str()), (200, Some("approved")), "{approved}");
    let (status, applied) =
        pm.send(&app, reqwest::Method::POST, &format!("/api/v1/changes/{id}/apply"), Value::Null).await;
    assert_eq!((status, applied["state"].as_str()), (200, Some("applied")), "{applied}");
    let (_, detail) = pm.send(&app, reqwest::Method::GET, "/api/v1/routes/checkout", Value::Null).await;
    assert_eq!(
        (detail["version"].as_i64(), detail["route"]["default_pool"].as_str()),
        (Some(2), Some("sea-pay")),
        "{detail}"
    );
    let name = client::route::RouteName::parse("checkout").unwrap();
    assert_eq!(app.state.route_admin.version(&name).await.unwrap(), Some(2));
    let reason: String = sqlx::query_scalar(
        "select reason from audit where entity = 'route:checkout' and action = 'route.put' order by id desc limit 1",
    )
    .fetch_one(&app.state.db)
    .await
    .unwrap();
    assert!(reason.starts_with(&format!("change request {id}")), "{reason}");
}
