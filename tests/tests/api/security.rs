//! The boundary, tried as an attacker would (issue 37): each test sends what a caller can
//! send — a password-less sign-in, a flood of guesses at once, invented methods, a huge
//! adversarial prompt, a health policy or pin that slips past four-eyes, an acknowledgement
//! by a token — and checks the clear 4xx and that nothing changed that may not.

use std::collections::HashMap;

use futures::future::join_all;
use integration::{spawn_app_with, TestApp};
use serde_json::{json, Value};
use server::configuration::AdminAccess;

use crate::auth_http::{login, session, ui};

const TOKEN: &str = "security-admin-token-0123456789";

/// A server that asks for credentials, with a configured admin token (actor `admin`, a
/// user without a password), the demo seed and its approval policy on `cn-pay`.
async fn guarded_app() -> (TestApp, HashMap<String, String>) {
    let app = spawn_app_with(|s| {
        s.auth.open = false;
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "admin".into() });
    })
    .await;
    let report = integration::seed_demo(&app).await;
    let passwords = report.users.into_iter().map(|(name, _, password)| (name, password)).collect();
    (app, passwords)
}

async fn sessions_open(app: &TestApp, user: &str) -> i64 {
    sqlx::query_scalar("select count(*) from user_session where user_name = $1")
        .bind(user)
        .fetch_one(&app.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_user_without_a_password_never_signs_in_whatever_is_typed() {
    let (app, _) = guarded_app().await;
    let hash: Option<String> = sqlx::query_scalar("select password_hash from app_user where name = 'admin'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(hash, None, "the configured token's actor is a user without a password");
    // The phrase the dummy hash was once made from, an empty password, anything else.
    for password in ["not a password of anyone", "", "admin", "a-long-enough-password"] {
        let (status, body, cookie) = login(&app, "admin", password).await;
        assert_eq!((status, cookie), (401, None), "{password:?}: {body}");
    }
    // A user recorded without a password (as a seed or the token's actor is).
    server::access::store::ensure_user(&app.state.db, "legacy", "viewer").await.unwrap();
    let (status, _, cookie) = login(&app, "legacy", "not a password of anyone").await;
    assert_eq!((status, cookie), (401, None));
    assert_eq!(sessions_open(&app, "admin").await + sessions_open(&app, "legacy").await, 0, "no session opened");
}

#[tokio::test]
async fn forty_guesses_at_once_check_at_most_five_passwords_and_the_right_one_among_them_is_refused() {
    let (app, passwords) = guarded_app().await;
    let right = passwords["demo-viewer"].clone();
    // 39 wrong guesses sent together, the right one right behind them while they are in flight.
    let guesses: Vec<String> = (0..39).map(|i| format!("wrong password number {i}")).collect();
    let wrong: Vec<_> = guesses.iter().map(|g| login(&app, "demo-viewer", g)).collect();
    let last = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        login(&app, "demo-viewer", &right).await
    };
    let (answers, (status, body, cookie)) = tokio::join!(join_all(wrong), last);
    // Refused all (401), or throttled at the door before any check (429).
    assert!(answers.iter().all(|(status, _, cookie)| (*status == 401 || *status == 429) && cookie.is_none()));
    assert!(status == 401 || status == 429, "the right guess behind 39 wrong ones is refused: {status} {body}");
    assert_eq!(cookie, None);
    assert_eq!(sessions_open(&app, "demo-viewer").await, 0);
    let locked: bool = sqlx::query_scalar("select locked_until > now() from app_user where name = 'demo-viewer'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert!(locked, "the fifth attempt locked the account");
}

#[tokio::test]
async fn whatever_the_parallelism_at_most_five_passwords_are_checked_per_lock_period() {
    // Below the door's throttle: the sign-in itself, 40 at once for one name.
    let (app, passwords) = guarded_app().await;
    let ttl = std::time::Duration::from_secs(3600);
    let mut guesses: Vec<String> = (0..39).map(|i| format!("wrong password number {i}")).collect();
    guesses.push(passwords["demo-operator"].clone());
    let tries = guesses.iter().map(|g| server::access::login(&app.state.db, "demo-operator", g, ttl));
    let results = join_all(tries).await;
    let checked = results.iter().filter(|r| matches!(r, Err(server::access::LoginError::Invalid) | Ok(_))).count();
    let locked = results.iter().filter(|r| matches!(r, Err(server::access::LoginError::Locked { .. }))).count();
    assert!(checked <= 5, "{checked} passwords checked");
    assert_eq!(checked + locked, 40, "every other attempt met the lock");
}

#[tokio::test]
async fn invented_methods_add_no_metric_series() {
    let (app, _) = guarded_app().await;
    let served = &app;
    let metrics =
        || async move { served.request(reqwest::Method::GET, "/metrics").bearer_auth(TOKEN).send().await.unwrap() };
    let before = metrics().await.text().await.unwrap();
    for i in 0..60 {
        let method = reqwest::Method::from_bytes(format!("M{i}").as_bytes()).unwrap();
        let status = app.request(method.clone(), "/api/v1/pools").send().await.unwrap().status().as_u16();
        assert!((400..500).contains(&status), "{method}: {status}");
        app.request(method, &format!("/no/such/path/{i}")).send().await.unwrap();
    }
    let after = metrics().await.text().await.unwrap();
    assert!(!after.contains("method=\"M"), "no series names an invented method");
    assert!(!after.contains("/no/such/path"), "no series names a raw path");
    assert!(after.contains("method=\"other\""), "they are counted as other");
    let grown = after.lines().count() as i64 - before.lines().count() as i64;
    assert!(grown < 60, "{grown} lines more for 120 requests of 60 invented methods");
}

#[tokio::test]
async fn metrics_and_readiness_details_are_for_operators_and_scrapers_only() {
    let (app, passwords) = guarded_app().await;
    assert_eq!(app.get("/metrics").await.status(), 401);
    assert_eq!(app.get("/readyz/details").await.status(), 401);
    let (status, ready) = app.get_json("/readyz").await;
    assert_eq!((status, ready), (200, json!({"status": "ready"})), "the public probe says only ready or not");
    let mint = |scope: &'static str| {
        let app = &app;
        async move {
            let (status, t) = app
                .send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": scope, "scope": scope}))
                .await;
            assert_eq!(status, 201, "{t}");
            t["token"].as_str().unwrap().to_owned()
        }
    };
    let scraper = mint("metrics").await;
    let dataplane = mint("dataplane").await;
    let get = |path: &'static str, token: String| {
        let app = &app;
        async move { app.request(reqwest::Method::GET, path).bearer_auth(token).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get("/metrics", scraper.clone()).await, 200);
    assert_eq!(get("/readyz/details", scraper.clone()).await, 200);
    assert_eq!(get("/api/v1/pools", scraper.clone()).await, 403, "a scraper reads nothing else");
    assert_eq!(get("/metrics", dataplane.clone()).await, 403);
    let viewer = session(&app, &passwords, "viewer").await;
    let (status, _) = ui(&app, &viewer, reqwest::Method::GET, "/readyz/details", Value::Null).await;
    assert_eq!(status, 200, "any signed-in role reads the details");
    // A scraper's token is bound to nothing: bindings are refused.
    let (status, body) = app
        .send(
            reqwest::Method::POST,
            "/api/v1/tokens",
            Some(TOKEN),
            json!({"name": "s", "scope": "metrics", "pools": []}),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (400, Some("scope")), "{body}");
}

#[tokio::test]
async fn a_four_mebibyte_prompt_without_spaces_is_answered_promptly() {
    let (app, _) = guarded_app().await;
    let (status, token) = app
        .send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": "gw", "scope": "dataplane"}))
        .await;
    assert_eq!(status, 201, "{token}");
    let token = token["token"].as_str().unwrap().to_owned();
    let prompts =
        ["a".repeat(4 * 1024 * 1024 - 64), "é".repeat(2 * 1024 * 1024 - 64), " ".repeat(4 * 1024 * 1024 - 64)];
    for (i, prompt) in prompts.into_iter().enumerate() {
        let body = json!({"request_id": format!("big-{i}"), "prompt": prompt, "max_tokens": 10, "model": "gpt-4o"});
        // A guard, not a speed claim: unbounded, byte-pair merging of one 4 MiB piece takes minutes.
        let response = app
            .request(reqwest::Method::POST, "/api/v1/tenants/acme/quota/reserve")
            .bearer_auth(&token)
            .timeout(std::time::Duration::from_secs(20))
            .json(&body)
            .send()
            .await
            .expect("answered before the guard's timeout");
        let status = response.status().as_u16();
        let reply: Value = response.json().await.unwrap();
        assert!(status == 200 || status == 429, "{status}: {reply}");
        if status == 200 {
            assert!(reply["estimate"]["prompt_tokens"].as_u64().unwrap() > 0, "{reply}");
        }
    }
    // Over the cap: refused by name.
    let body = json!({"request_id": "too-big", "prompt": "a".repeat(4 * 1024 * 1024 + 1), "max_tokens": 10,
                      "model": "gpt-4o"});
    let (status, reply) =
        app.send(reqwest::Method::POST, "/api/v1/tenants/acme/quota/reserve", Some(&token), body).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("prompt")), "{reply}");
}

#[tokio::test]
async fn under_an_approval_policy_a_health_policy_is_refused_and_a_pin_is_break_glass() {
    let (app, passwords) = guarded_app().await;
    let extreme = json!({"policy": {"min_volume": 1, "min_success_rate": 0.99, "eject_below": 0.99,
                                    "max_ejected_percent": 100}, "reason": "strict"});
    let (status, body) =
        app.send(reqwest::Method::PUT, "/api/v1/pools/cn-pay/health_policy", Some(TOKEN), extreme.clone()).await;
    assert_eq!((status, body["field"].as_str()), (409, Some("policy")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("pool:cn-pay"), "names the policy: {body}");
    let stored: Value = sqlx::query_scalar("select health_policy from pool where name = 'cn-pay'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert!(stored.get("eject_below").is_none_or(|v| v != 0.99), "nothing stored: {stored}");
    // A pool without a policy takes it.
    let (status, body) =
        app.send(reqwest::Method::PUT, "/api/v1/pools/sea-pay/health_policy", Some(TOKEN), extreme).await;
    assert_eq!(status, 200, "{body}");

    // A pin of a channel that cn-pay holds stays immediate, flagged for an auditor.
    let operator = session(&app, &passwords, "operator").await;
    let (status, body) = ui(
        &app,
        &operator,
        reqwest::Method::POST,
        "/api/v1/channels/WECHAT_B/health/pin",
        json!({"state": "healthy", "reason": "acquirer says fine"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, open) =
        app.send(reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Some(TOKEN), Value::Null).await;
    let flags: Vec<(&str, &str)> = open["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["action"].as_str().unwrap(), f["policy_scope"].as_str().unwrap()))
        .collect();
    assert_eq!(flags, [("channel.pin", "pool:cn-pay")], "{open}");
}

#[tokio::test]
async fn a_break_glass_flag_is_acknowledged_by_a_second_person_signed_in_never_by_a_token() {
    let (app, passwords) = guarded_app().await;
    let operator = session(&app, &passwords, "operator").await;
    let (status, body) = ui(
        &app,
        &operator,
        reqwest::Method::POST,
        "/api/v1/pools/cn-pay/members/UNION_C/eject",
        json!({"reason": "acquirer down", "expected_version": 1}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, open) =
        app.send(reqwest::Method::GET, "/api/v1/break-glass?acknowledged=false", Some(TOKEN), Value::Null).await;
    let id = open["flags"][0]["id"].as_i64().unwrap();
    assert_eq!(
        (open["unacknowledged"].as_i64(), open["total"].as_i64(), open["page"].as_i64()),
        (Some(1), Some(1), Some(1))
    );
    let (status, body) = app.send(reqwest::Method::GET, "/api/v1/break-glass?page=0", Some(TOKEN), Value::Null).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("page")), "{body}");
    let path = format!("/api/v1/break-glass/{id}/acknowledge");

    // The operator, as a token they could have been given, and the configured admin token.
    let (status, minted) =
        app.send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": "bot", "scope": "admin"})).await;
    assert_eq!(status, 201, "{minted}");
    for token in [minted["token"].as_str().unwrap(), TOKEN] {
        let (status, body) = app.send(reqwest::Method::POST, &path, Some(token), json!({"comment": "fine"})).await;
        assert_eq!(status, 403, "{body}");
        assert!(body["error"].as_str().unwrap().contains("signed in"), "{body}");
    }
    let acknowledged: i64 = sqlx::query_scalar("select count(*) from break_glass where acknowledged_at is not null")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(acknowledged, 0, "nothing acknowledged");
    let auditor = session(&app, &passwords, "auditor").await;
    let (status, body) = ui(&app, &auditor, reqwest::Method::POST, &path, json!({"comment": "outage confirmed"})).await;
    assert_eq!((status, body["acknowledged_by"].as_str()), (200, Some("demo-auditor")), "{body}");
    let (_, all) = app.send(reqwest::Method::GET, "/api/v1/break-glass?page=2", Some(TOKEN), Value::Null).await;
    assert_eq!((all["flags"].as_array().map(Vec::len), all["unacknowledged"].as_i64()), (Some(0), Some(0)), "{all}");
}

/// What a tenant's quota holds now: tokens available, leases and requests today.
async fn reserved_of(app: &TestApp, tenant: &str) -> (Value, Value, Value) {
    let (status, usage) =
        app.send(reqwest::Method::GET, &format!("/api/v1/tenants/{tenant}/quota"), Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200, "{usage}");
    (usage["available"].clone(), usage["leases"].clone(), usage["requests_today"].clone())
}

#[tokio::test]
async fn a_data_plane_token_serves_only_the_tenants_pools_routes_and_channels_it_is_bound_to() {
    let (app, _) = guarded_app().await;
    let post = reqwest::Method::POST;
    let bound = json!({"name": "acme gateway", "scope": "dataplane", "tenants": ["acme"], "pools": ["cn-pay"],
                       "routes": [], "channels": ["WECHAT_B"]});
    let (status, created) = app.send(post.clone(), "/api/v1/tokens", Some(TOKEN), bound).await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    let id = created["id"].as_i64().unwrap();
    let send = |path: String, body: Value| {
        let (app, token) = (&app, token.clone());
        async move { app.send(reqwest::Method::POST, &path, Some(&token), body).await }
    };

    // Its own tenant, pool and channel: served.
    let reserve = |r: &str| json!({"request_id": r, "tokens": 100});
    assert_eq!(send("/api/v1/tenants/acme/quota/reserve".into(), reserve("mine")).await.0, 200);
    assert_eq!(send("/api/v1/pools/cn-pay/draw".into(), Value::Null).await.0, 200);
    assert_eq!(send("/api/v1/channels/WECHAT_B/outcomes".into(), json!({"ok": 1, "fail": 0})).await.0, 202);

    // Anything else: 403 naming the resource, and nothing done.
    let before = reserved_of(&app, "globex").await;
    for (path, body, named) in [
        ("/api/v1/tenants/globex/quota/reserve", reserve("theirs"), "tenant \"globex\""),
        (
            "/api/v1/tenants/globex/quota/settle",
            json!({"request_id": "theirs", "actual_tokens": 1}),
            "tenant \"globex\"",
        ),
        ("/api/v1/tenants/globex/quota/release", json!({"request_id": "theirs"}), "tenant \"globex\""),
        ("/api/v1/pools/sea-pay/draw", Value::Null, "pool \"sea-pay\""),
        ("/api/v1/routes/checkout/draw", json!({"attributes": {}}), "route \"checkout\""),
        ("/api/v1/channels/ALIPAY_A/outcomes", json!({"ok": 0, "fail": 1000}), "channel \"ALIPAY_A\""),
    ] {
        let (status, body) = send(path.to_owned(), body).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().contains(named), "{path}: {body}");
    }
    assert_eq!(reserved_of(&app, "globex").await, before, "nothing reserved for another tenant");
    let (_, health) =
        app.send(reqwest::Method::GET, "/api/v1/channels/ALIPAY_A/health", Some(TOKEN), Value::Null).await;
    assert!(!health.to_string().contains("1000"), "no forged failures counted: {health}");

    // Bad bindings: 400 naming the field, nothing created or changed.
    for (body, field) in [
        (json!({"name": "x", "scope": "dataplane", "tenants": ["*", "acme"]}), "tenants"),
        (json!({"name": "x", "scope": "dataplane", "pools": ["cn pay"]}), "pools[0]"),
        (json!({"name": "x", "scope": "dataplane", "channels": ["A", "A"]}), "channels[1]"),
        (json!({"name": "x", "scope": "admin", "tenants": ["acme"]}), "scope"),
    ] {
        let (status, reply) = app.send(post.clone(), "/api/v1/tokens", Some(TOKEN), body).await;
        assert_eq!((status, reply["field"].as_str()), (400, Some(field)), "{reply}");
    }
    let tokens: i64 = sqlx::query_scalar("select count(*) from api_token").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(tokens, 1);

    // Rebound: served from the next request on this instance, and audited before and after.
    let path = format!("/api/v1/tokens/{id}/bindings");
    let (status, reply) = app
        .send(
            reqwest::Method::PUT,
            &path,
            Some(TOKEN),
            json!({"tenants": ["globex"], "pools": ["*"], "routes": [], "channels": []}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(send("/api/v1/tenants/acme/quota/reserve".into(), reserve("mine-2")).await.0, 403);
    assert_eq!(send("/api/v1/tenants/globex/quota/reserve".into(), reserve("theirs-2")).await.0, 200);
    assert_eq!(send("/api/v1/pools/sea-pay/draw".into(), Value::Null).await.0, 200);
    let (before, after): (Value, Value) =
        sqlx::query_as("select before, after from audit where action = 'token.bindings'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(
        (before["bindings"]["tenants"].clone(), after["bindings"]["tenants"].clone()),
        (json!(["acme"]), json!(["globex"]))
    );
    let put = |path: String, body: Value| {
        let app = &app;
        async move { app.send(reqwest::Method::PUT, &path, Some(TOKEN), body).await }
    };
    let (status, reply) = put(path.clone(), json!({"tenants": ["bad name"]})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("tenants[0]")), "{reply}");
    assert_eq!(put("/api/v1/tokens/999999/bindings".into(), json!({})).await.0, 404);
    let (_, admin_token) =
        app.send(post.clone(), "/api/v1/tokens", Some(TOKEN), json!({"name": "ci", "scope": "admin"})).await;
    let (status, reply) = put(format!("/api/v1/tokens/{}/bindings", admin_token["id"]), json!({})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("scope")), "{reply}");

    // A token made before bindings existed serves any, and the listing says so.
    sqlx::query(
        "insert into api_token (name, prefix, hash, scope, created_by) values ('old', 'tsr_old', $1, 'dataplane', 'x')",
    )
    .bind(server::access::sha256("tsr_old-token-made-long-ago"))
    .execute(&app.state.db)
    .await
    .unwrap();
    let (status, _) = app
        .send(post.clone(), "/api/v1/tenants/globex/quota/reserve", Some("tsr_old-token-made-long-ago"), reserve("old"))
        .await;
    assert_eq!(status, 200);
    let (_, list) = app.send(reqwest::Method::GET, "/api/v1/tokens", Some(TOKEN), Value::Null).await;
    let old = list["tokens"].as_array().unwrap().iter().find(|t| t["name"] == "old").unwrap().clone();
    assert_eq!((old["tenants"].clone(), old["channels"].clone()), (json!(["*"]), json!(["*"])), "{old}");
}

async fn sign_in_from(app: &TestApp, address: String, name: String, password: &str) -> reqwest::Response {
    app.request(reqwest::Method::POST, "/api/v1/auth/login")
        .header("x-forwarded-for", address)
        .json(&json!({"name": name, "password": password}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_flood_of_sign_ins_is_throttled_per_address_and_per_name_before_any_password_is_checked() {
    let app = spawn_app_with(|s| {
        s.auth.open = false;
        s.trusted_proxy_header = Some("x-forwarded-for".into());
    })
    .await;
    let report = server::seed::demo_seed(&app.state.db).await.unwrap();
    let passwords: HashMap<String, String> = report.users.into_iter().map(|(n, _, p)| (n, p)).collect();

    // One address guessing at many names: past its burst, 429 with Retry-After.
    let flood: Vec<_> =
        (0..45).map(|i| sign_in_from(&app, "10.0.0.1".into(), format!("ghost-{i}"), "whatever password")).collect();
    let answers = join_all(flood).await;
    let throttled: Vec<_> = answers.iter().filter(|r| r.status() == 429).collect();
    assert!(!throttled.is_empty(), "{:?}", answers.iter().map(|r| r.status()).collect::<Vec<_>>());
    assert!(throttled.iter().all(|r| r.headers().get("retry-after").is_some()), "Retry-After on every 429");
    assert!(answers.iter().all(|r| r.status() == 401 || r.status() == 429));
    // Another address is not held up by it.
    let response = sign_in_from(&app, "10.0.0.2".into(), "demo-viewer".into(), &passwords["demo-viewer"]).await;
    assert_eq!(response.status(), 200);

    // One name guessed at from many addresses: past the name's burst, 429, and the account's
    // lock is the ordinary one (15 minutes), never pushed further by the flood.
    let flood: Vec<_> =
        (0..40).map(|i| sign_in_from(&app, format!("10.1.0.{i}"), "demo-pm".into(), "wrong password!!")).collect();
    let statuses: Vec<u16> = join_all(flood).await.iter().map(|r| r.status().as_u16()).collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    let until: bool =
        sqlx::query_scalar("select locked_until <= now() + interval '15 minutes' from app_user where name = 'demo-pm'")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert!(until, "locked for 15 minutes at most");

    // Forwarded addresses are read only from the configured header: without it, every
    // request is the peer's (one address), whatever X-Forwarded-For claims.
    let plain = spawn_app_with(|s| s.auth.open = false).await;
    let flood: Vec<_> = (0..45)
        .map(|i| sign_in_from(&plain, format!("10.2.0.{i}"), format!("ghost-{i}"), "whatever password"))
        .collect();
    let statuses: Vec<u16> = join_all(flood).await.iter().map(|r| r.status().as_u16()).collect();
    assert!(statuses.contains(&429), "an unconfigured X-Forwarded-For does not spread the flood: {statuses:?}");
}

#[tokio::test]
async fn a_flood_of_unknown_tokens_is_throttled_and_answered_from_memory() {
    let (app, _) = guarded_app().await;
    let mut statuses = Vec::new();
    for i in 0..45 {
        // One made-up token over and over, then fresh ones: both count against the address.
        let token = if i < 20 { "tsr_made-up-token".to_owned() } else { format!("tsr_made-up-{i}") };
        let response =
            app.request(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw").bearer_auth(token).send().await.unwrap();
        if response.status() == 429 {
            assert!(response.headers().get("retry-after").is_some());
        }
        statuses.push(response.status().as_u16());
    }
    assert!(statuses[..20].iter().all(|s| *s == 401), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    let used: i64 = sqlx::query_scalar("select count(*) from api_token").fetch_one(&app.state.db).await.unwrap();
    assert_eq!(used, 0, "nothing written");
    // While the address is out of budget, even a good token it never showed is not looked up
    // (no query for anything new); once a token refills the bucket (one a second), it is served.
    let (status, token) = app
        .send(reqwest::Method::POST, "/api/v1/tokens", Some(TOKEN), json!({"name": "gw", "scope": "dataplane"}))
        .await;
    assert_eq!(status, 201);
    let good = token["token"].as_str().unwrap().to_owned();
    let (status, _) = app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&good), Value::Null).await;
    assert_eq!(status, 429);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (status, _) = app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&good), Value::Null).await;
    assert_eq!(status, 200);
    // A made-up session cookie is counted the same way: refused before any lookup now.
    let refused = app
        .request(reqwest::Method::GET, "/api/v1/pools")
        .header("cookie", "tessera_session=made-up")
        .send()
        .await
        .unwrap()
        .status();
    assert!(refused == 401 || refused == 429, "{refused}");
}

#[tokio::test]
async fn a_password_change_a_reset_sign_out_everywhere_and_idleness_end_sessions() {
    let (app, passwords) = guarded_app().await;
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;
    let first = session(&app, &passwords, "pm").await;
    let second = session(&app, &passwords, "pm").await;

    // One's own password: the current one is checked, the new one follows the rules.
    let change = |current: &str, new: &str| json!({"current": current, "new": new});
    let (status, body) =
        ui(&app, &first, post.clone(), "/api/v1/auth/password", change("not my password", "a-new-long-password")).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) =
        ui(&app, &first, post.clone(), "/api/v1/auth/password", change(&passwords["demo-pm"], "short")).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("new")), "{body}");
    let (status, body) =
        app.send(post.clone(), "/api/v1/auth/password", Some(TOKEN), change("x", "a-new-long-password")).await;
    assert_eq!(status, 403, "a token has no password: {body}");
    let (status, body) =
        ui(&app, &first, post.clone(), "/api/v1/auth/password", change(&passwords["demo-pm"], "a-new-long-password"))
            .await;
    assert_eq!((status, body["sessions_ended"].as_u64()), (200, Some(1)), "{body}");
    assert_eq!(ui(&app, &second, get.clone(), "/api/v1/pools", Value::Null).await.0, 401, "the other session ended");
    assert_eq!(ui(&app, &first, get.clone(), "/api/v1/pools", Value::Null).await.0, 200, "this one stays");
    assert_eq!(login(&app, "demo-pm", &passwords["demo-pm"]).await.0, 401, "the old password is gone");
    let mut renewed = passwords.clone();
    renewed.insert("demo-pm".into(), "a-new-long-password".into());
    let third = session(&app, &renewed, "pm").await;

    // Sign out everywhere: every session of the user, this one included.
    let (status, body) = ui(&app, &first, post.clone(), "/api/v1/auth/logout_everywhere", Value::Null).await;
    assert_eq!((status, body["sessions_ended"].as_u64()), (200, Some(2)), "{body}");
    for s in [&first, &third] {
        assert_eq!(ui(&app, s, get.clone(), "/api/v1/pools", Value::Null).await.0, 401);
    }

    // An admin resets a password: generated and shown once, every session ended.
    let fourth = session(&app, &renewed, "pm").await;
    let admin = session(&app, &passwords, "admin").await;
    let (status, body) = ui(&app, &admin, post.clone(), "/api/v1/users/demo-pm/password", Value::Null).await;
    assert_eq!((status, body["sessions_ended"].as_u64()), (200, Some(1)), "{body}");
    let generated = body["password"].as_str().unwrap().to_owned();
    assert_eq!(ui(&app, &fourth, get.clone(), "/api/v1/pools", Value::Null).await.0, 401);
    assert_eq!(login(&app, "demo-pm", &generated).await.0, 200);
    let (status, body) =
        ui(&app, &admin, post.clone(), "/api/v1/users/demo-pm/password", json!({"password": "short"})).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("password")), "{body}");
    let (status, _) =
        ui(&app, &admin, post.clone(), "/api/v1/users/demo-pm/password", json!({"pasword": "typo"})).await;
    assert_eq!(status, 400, "an unknown field is refused, not a generated password");
    assert_eq!(login(&app, "demo-pm", &generated).await.0, 200, "nothing changed");
    assert_eq!(ui(&app, &admin, post.clone(), "/api/v1/users/nobody/password", Value::Null).await.0, 404);
    let actions: Vec<String> = sqlx::query_scalar(
        "select action from audit where entity = 'user:demo-pm' and action <> 'user.create' order by id",
    )
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    assert_eq!(actions, ["user.password", "user.logout_everywhere", "user.password"]);

    // A session unused for longer than the idle time ends (default two hours).
    let fifth = session(&app, &passwords, "viewer").await;
    sqlx::query("update user_session set last_seen_at = now() - interval '121 minutes'")
        .execute(&app.state.db)
        .await
        .unwrap();
    let (status, body) = ui(&app, &fifth, get.clone(), "/api/v1/pools", Value::Null).await;
    assert_eq!(status, 401, "{body}");
}

#[tokio::test]
async fn the_session_cookie_is_secure_with_the_host_prefix_unless_on_loopback() {
    let (app, passwords) = guarded_app().await;
    let response = app
        .request(reqwest::Method::POST, "/api/v1/auth/login")
        .header("host", "tessera.example.com")
        .json(&json!({"name": "demo-viewer", "password": passwords["demo-viewer"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let cookie = response.headers().get("set-cookie").unwrap().to_str().unwrap().to_owned();
    assert!(
        cookie.starts_with("__Host-tessera_session=") && cookie.contains("Secure") && cookie.contains("Path=/"),
        "{cookie}"
    );
    // It works as the session cookie.
    let value = cookie.split(';').next().unwrap();
    let me = app.request(reqwest::Method::GET, "/api/v1/auth/me").header("cookie", value).send().await.unwrap();
    assert_eq!(me.status(), 200);
    // On loopback over plain HTTP (development), the plain name without Secure.
    let (status, _, cookie) = login(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let cookie = cookie.unwrap();
    assert_eq!(status, 200);
    assert!(cookie.starts_with("tessera_session=") && !cookie.contains("Secure"), "{cookie}");
}

#[tokio::test]
async fn a_password_change_guesses_no_faster_than_a_sign_in() {
    let (app, passwords) = guarded_app().await;
    let s = session(&app, &passwords, "pm").await;
    for i in 0..5 {
        let body = json!({"current": format!("guess number {i}"), "new": "a-new-long-password"});
        let (status, _) = ui(&app, &s, reqwest::Method::POST, "/api/v1/auth/password", body).await;
        assert_eq!(status, 403);
    }
    let body = json!({"current": passwords["demo-pm"], "new": "a-new-long-password"});
    let (status, body) = ui(&app, &s, reqwest::Method::POST, "/api/v1/auth/password", body).await;
    assert_eq!(status, 403, "locked: even the right password changes nothing: {body}");
    assert!(body["error"].as_str().unwrap().contains("locked"), "{body}");
    assert_eq!(login(&app, "demo-pm", &passwords["demo-pm"]).await.0, 401, "the sign-in lock is the same lock");
}

#[tokio::test]
async fn a_plain_session_cookie_counts_only_on_loopback_and_open_mode_answers_only_loopback() {
    let (app, passwords) = guarded_app().await;
    let (_, _, cookie) = login(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    let plain = cookie.unwrap().split(';').next().unwrap().to_owned();
    let me = |host: &'static str| {
        let (app, plain) = (&app, plain.clone());
        async move {
            app.request(reqwest::Method::GET, "/api/v1/auth/me")
                .header("host", host)
                .header("cookie", plain)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(me("127.0.0.1").await, 200);
    assert_eq!(me("tessera.example.com").await, 401, "a planted plain cookie is ignored off loopback");

    let open = integration::spawn_app().await;
    let page = open
        .request(reqwest::Method::GET, "/users")
        .header("host", "rebind.attacker.example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 403, "a rebound name gets no page");
    let api = open
        .request(reqwest::Method::GET, "/api/v1/pools")
        .header("host", "rebind.attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 403);
    assert_eq!(open.get("/api/v1/pools").await.status(), 200, "loopback is served");
}

#[tokio::test]
async fn names_sent_from_outside_leave_no_queue_behind() {
    let (app, _) = guarded_app().await;
    let post = reqwest::Method::POST;
    let any = json!({"name": "any gateway", "scope": "dataplane", "tenants": ["*"], "pools": ["*"],
                     "routes": ["*"], "channels": ["*"]});
    let (status, created) = app.send(post.clone(), "/api/v1/tokens", Some(TOKEN), any).await;
    assert_eq!(status, 201, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    let token = token.as_str();
    let pools_cached = app.state.pools.cached_pools();
    // 400 invented tenants and 400 invented pools (drawn plainly and by a sticky key), 50 at
    // a time, by a data-plane token that may use any: each is a 404, and no coalescing
    // queue nor cache entry stays.
    for round in 0..8 {
        let sent = (0..50).map(|i| {
            let n = round * 50 + i;
            let (app, post) = (&app, post.clone());
            async move {
                let tenant = format!("/api/v1/tenants/nobody-{n}/quota/reserve");
                let reserve = app.send(post.clone(), &tenant, Some(token), json!({"request_id": "r", "tokens": 1}));
                let pool = format!("/api/v1/pools/nowhere-{n}/draw");
                let draw = app.send(post.clone(), &pool, Some(token), Value::Null);
                let sticky = app.send(post, &pool, Some(token), json!({"sticky_key": "customer-1"}));
                let ((reserved, body), (drawn, drew), (stuck, kept)) = futures::join!(reserve, draw, sticky);
                assert_eq!((reserved, drawn, stuck), (404, 404, 404), "{body} {drew} {kept}");
            }
        });
        join_all(sent).await;
    }
    assert_eq!(app.state.quotas.coalescing_queues(), 0, "no queue for a tenant that does not exist");
    assert_eq!(app.state.pools.coalescing_queues(), 0, "no queue for a pool that does not exist");
    assert_eq!(app.state.pools.cached_pools(), pools_cached, "no cache entry for a pool that does not exist");
    // A real pool and tenant still share calls, and their queues go once idle.
    let draws = (0..20).map(|_| app.send(post.clone(), "/api/v1/pools/cn-pay/draw", Some(token), Value::Null));
    assert!(join_all(draws).await.iter().all(|(status, _)| *status == 200));
    let started = std::time::Instant::now();
    while app.state.pools.coalescing_queues() > 0 && started.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(app.state.pools.coalescing_queues(), 0, "an idle pool keeps no queue");
}
