//! Identity and access against a running server (not in open mode): sign-in per role,
//! what each role may do, CSRF and origin checks on session writes, expiry, lock-out,
//! API tokens and their scopes.

use std::collections::HashMap;

use integration::{json_reply, spawn_app_with, with_json, TestApp};
use serde_json::{json, Value};

pub(crate) struct Session {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

pub(crate) async fn app() -> (TestApp, HashMap<String, String>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    let report = integration::seed_demo(&app).await;
    // What each role may write directly (the demo's approval policy on cn-pay would send
    // weight changes through change requests).
    integration::ui::without_demo_policy(&app).await;
    let passwords = report.users.into_iter().map(|(name, _, password)| (name, password)).collect();
    (app, passwords)
}

pub(crate) async fn login(app: &TestApp, name: &str, password: &str) -> (u16, Value, Option<String>) {
    let response = app
        .request(reqwest::Method::POST, "/api/v1/auth/login")
        .json(&json!({"name": name, "password": password}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let cookie = response.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_owned());
    (status, response.json().await.unwrap_or(Value::Null), cookie)
}

pub(crate) async fn session(app: &TestApp, passwords: &HashMap<String, String>, role: &str) -> Session {
    let name = format!("demo-{role}");
    let (status, body, cookie) = login(app, &name, &passwords[&name]).await;
    assert_eq!(status, 200, "{body}");
    let cookie = cookie.unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let value = cookie.split(';').next().unwrap().to_owned();
    Session { cookie: value, csrf: body["csrf_token"].as_str().unwrap().to_owned() }
}

/// A request made by the UI: the session cookie, the CSRF token, our own origin.
pub(crate) async fn ui(app: &TestApp, s: &Session, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let request = app
        .request(method, path)
        .header("cookie", &s.cookie)
        .header("x-csrf-token", &s.csrf)
        .header("origin", &app.address);
    json_reply(with_json(request, &body)).await
}

fn weights(a: u64) -> Value {
    json!({"weights": [{"member": "ALIPAY_A", "weight": a}, {"member": "WECHAT_B", "weight": 30}, {"member": "UNION_C", "weight": 25}],
           "mode": "drain", "reason": "gray", "expected_version": 1})
}

#[tokio::test]
async fn each_role_signs_in_and_the_server_enforces_what_it_may_do() {
    let (app, passwords) = app().await;
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;

    // Without credentials: 401 everywhere under /api/v1 but sign-in and the API document.
    assert_eq!(app.get("/api/v1/pools").await.status(), 401);
    assert_eq!(app.get("/api/v1/openapi.json").await.status(), 200);
    assert_eq!(app.get("/healthz").await.status(), 200);

    for role in ["viewer", "operator", "pm", "auditor", "admin"] {
        let s = session(&app, &passwords, role).await;
        let (status, me) = ui(&app, &s, get.clone(), "/api/v1/auth/me", Value::Null).await;
        assert_eq!((status, me["role"].as_str()), (200, Some(role)), "{me}");
        let (status, _) = ui(&app, &s, get.clone(), "/api/v1/pools", Value::Null).await;
        assert_eq!(status, 200, "{role} reads");
    }

    let viewer = session(&app, &passwords, "viewer").await;
    let operator = session(&app, &passwords, "operator").await;
    let pm = session(&app, &passwords, "pm").await;
    let auditor = session(&app, &passwords, "auditor").await;

    // Weights: pm yes; viewer, operator, auditor no (a forged request is refused: 403).
    for s in [&viewer, &operator, &auditor] {
        let (status, body) = ui(&app, s, post.clone(), "/api/v1/pools/cn-pay/weights", weights(40)).await;
        assert_eq!(status, 403, "{body}");
    }
    let (status, body) = ui(&app, &pm, post.clone(), "/api/v1/pools/cn-pay/weights", weights(40)).await;
    assert_eq!(status, 200, "{body}");
    // Ejection: operator yes, pm no.
    let eject = json!({"reason": "probe failing", "expected_version": 2});
    let (status, _) = ui(&app, &pm, post.clone(), "/api/v1/pools/cn-pay/members/UNION_C/eject", eject.clone()).await;
    assert_eq!(status, 403);
    let (status, body) = ui(&app, &operator, post.clone(), "/api/v1/pools/cn-pay/members/UNION_C/eject", eject).await;
    assert_eq!(status, 200, "{body}");
    // Audit export and verification: auditor yes, viewer no.
    let (status, _) = ui(&app, &viewer, get.clone(), "/api/v1/audit/verify", Value::Null).await;
    assert_eq!(status, 403);
    let (status, report) = ui(&app, &auditor, get.clone(), "/api/v1/audit/verify", Value::Null).await;
    assert_eq!((status, report["intact"].as_bool()), (200, Some(true)));
    // Users and tokens: admin only.
    let (status, _) = ui(&app, &pm, get.clone(), "/api/v1/users", Value::Null).await;
    assert_eq!(status, 403);

    // Writes made through a session are audited with the user as actor and source `ui`.
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "select actor, source, action from audit where action in ('pool.weights', 'pool.eject') order by id",
    )
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("demo-pm".into(), "ui".into(), "pool.weights".into()),
            ("demo-operator".into(), "ui".into(), "pool.eject".into())
        ]
    );
}

#[tokio::test]
async fn session_writes_need_our_origin_and_the_csrf_token_and_sessions_expire() {
    let (app, passwords) = app().await;
    let pm = session(&app, &passwords, "pm").await;
    let path = "/api/v1/pools/cn-pay/weights";
    // A cross-origin form post carries the cookie but not our origin.
    let forged = app
        .request(reqwest::Method::POST, path)
        .header("cookie", &pm.cookie)
        .header("origin", "https://evil.example")
        .header("x-csrf-token", &pm.csrf)
        .json(&weights(40))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(forged.text().await.unwrap().contains("cross-origin"));
    // Our origin without the CSRF token.
    let no_token = app
        .request(reqwest::Method::POST, path)
        .header("cookie", &pm.cookie)
        .header("origin", &app.address)
        .json(&weights(40))
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 403);
    let versions: i64 = sqlx::query_scalar("select count(*) from snapshot where entity = 'pool:cn-pay'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(versions, 1, "nothing was written");

    // Expired: back to sign-in (401).
    sqlx::query("update user_session set expires_at = now() - interval '1 second'")
        .execute(&app.state.db)
        .await
        .unwrap();
    let (status, body) = ui(&app, &pm, reqwest::Method::GET, "/api/v1/pools", Value::Null).await;
    assert_eq!(status, 401);
    assert!(body["error"].as_str().unwrap().contains("sign in again"), "{body}");

    // Signing out ends the session.
    let fresh = session(&app, &passwords, "pm").await;
    let (status, _) = ui(&app, &fresh, reqwest::Method::POST, "/api/v1/auth/logout", Value::Null).await;
    assert_eq!(status, 200);
    let (status, _) = ui(&app, &fresh, reqwest::Method::GET, "/api/v1/pools", Value::Null).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn repeated_failed_sign_ins_lock_the_account_for_a_while() {
    let (app, passwords) = app().await;
    for _ in 0..5 {
        let (status, body, cookie) = login(&app, "demo-viewer", "wrong password!!").await;
        assert_eq!((status, cookie), (401, None), "{body}");
    }
    let (status, body, cookie) = login(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    assert_eq!((status, cookie), (401, None), "locked: even the right password opens no session: {body}");
    assert!(body["error"].as_str().unwrap().contains("locked for 15 minutes"), "{body}");
    let (status, _, _) = login(&app, "nobody", "whatever-password").await;
    assert_eq!(status, 401, "an unknown name answers like a wrong password");
    // When the lock has passed, the right password works and the count starts over.
    sqlx::query("update app_user set locked_until = now() - interval '1 second' where name = 'demo-viewer'")
        .execute(&app.state.db)
        .await
        .unwrap();
    let (status, _, _) = login(&app, "demo-viewer", &passwords["demo-viewer"]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn api_tokens_have_a_scope_are_shown_once_and_can_be_revoked() {
    let (app, passwords) = app().await;
    let admin = session(&app, &passwords, "admin").await;
    let (status, dp) =
        ui(&app, &admin, reqwest::Method::POST, "/api/v1/tokens", json!({"name": "gateway", "scope": "dataplane"}))
            .await;
    assert_eq!(status, 201, "{dp}");
    let dataplane = dp["token"].as_str().unwrap().to_owned();
    let (status, adm) =
        ui(&app, &admin, reqwest::Method::POST, "/api/v1/tokens", json!({"name": "ci bot", "scope": "admin"})).await;
    assert_eq!(status, 201);
    let automation = adm["token"].as_str().unwrap().to_owned();

    // dataplane: draws, not reads of the configuration.
    let (status, draw) =
        app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&dataplane), Value::Null).await;
    assert_eq!(status, 200, "{draw}");
    let (status, _) = app.send(reqwest::Method::GET, "/api/v1/pools", Some(&dataplane), Value::Null).await;
    assert_eq!(status, 403);
    // admin scope: configuration, not the data plane, not users and tokens.
    let (status, _) = app.send(reqwest::Method::GET, "/api/v1/pools", Some(&automation), Value::Null).await;
    assert_eq!(status, 200);
    let (status, _) =
        app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&automation), Value::Null).await;
    assert_eq!(status, 403);
    let (status, _) = app.send(reqwest::Method::GET, "/api/v1/tokens", Some(&automation), Value::Null).await;
    assert_eq!(status, 403);
    // Token writes need no CSRF token (no cookie involved) and are audited as `api`.
    let (status, body) =
        app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/weights", Some(&automation), weights(44)).await;
    assert_eq!(status, 200, "{body}");
    let source: String = sqlx::query_scalar("select source from audit where action = 'pool.weights'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(source, "api");

    // Listed without secrets; revoked at once.
    let (_, list) = ui(&app, &admin, reqwest::Method::GET, "/api/v1/tokens", Value::Null).await;
    assert!(!list.to_string().contains(&dataplane), "secrets are never listed");
    let id = dp["id"].as_i64().unwrap();
    let (status, _) =
        ui(&app, &admin, reqwest::Method::POST, &format!("/api/v1/tokens/{id}/revoke"), Value::Null).await;
    assert_eq!(status, 200);
    let (status, _) = app.send(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw", Some(&dataplane), Value::Null).await;
    assert_eq!(status, 401);
    let stored: Vec<u8> =
        sqlx::query_scalar("select hash from api_token where id = $1").bind(id).fetch_one(&app.state.db).await.unwrap();
    assert_eq!(stored.len(), 32, "only a SHA-256 is kept");

    // Users: admin creates one (password generated, shown once); others may not.
    let (status, created) =
        ui(&app, &admin, reqwest::Method::POST, "/api/v1/users", json!({"name": "carol", "role": "pm"})).await;
    assert_eq!(status, 201, "{created}");
    let (status, _, _) = login(&app, "carol", created["password"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    let (status, body) = ui(
        &app,
        &admin,
        reqwest::Method::POST,
        "/api/v1/users",
        json!({"name": "carol", "role": "pm", "password": "another-long-password"}),
    )
    .await;
    assert_eq!((status, body["field"].as_str()), (409, Some("name")));
    let (status, body) = ui(
        &app,
        &admin,
        reqwest::Method::POST,
        "/api/v1/users",
        json!({"name": "dave", "role": "boss", "password": "another-long-password"}),
    )
    .await;
    assert_eq!((status, body["field"].as_str()), (400, Some("role")));
    let (status, body) = ui(
        &app,
        &admin,
        reqwest::Method::POST,
        "/api/v1/users",
        json!({"name": "dave", "role": "pm", "password": "short"}),
    )
    .await;
    assert_eq!((status, body["field"].as_str()), (400, Some("password")));
    let hash: String = sqlx::query_scalar("select password_hash from app_user where name = 'carol'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
}

#[tokio::test]
async fn a_percent_encoded_path_is_judged_as_the_route_it_reaches() {
    let (app, _) = app().await;
    for path in ["/api/v%31/users", "/api/v%31/tokens", "/api/%761/pools", "/api/v1/%75sers", "/api/v%31/audit.csv"] {
        let status = app.get(path).await.status();
        assert_eq!(status, 401, "{path}");
    }
    let created = app
        .request(reqwest::Method::POST, "/api/v%31/users")
        .json(&json!({"name": "mallory", "role": "admin", "password": "a-long-enough-password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 401);
    let draw = app.request(reqwest::Method::POST, "/api/v%31/pools/cn-pay/draw").send().await.unwrap();
    assert_eq!(draw.status(), 401);
    let users: i64 = sqlx::query_scalar("select count(*) from app_user where name = 'mallory'")
        .fetch_one(&app.state.db)
        .await
        .unwrap();
    assert_eq!(users, 0, "nothing was written");
}

#[tokio::test]
async fn a_lock_that_has_passed_starts_the_count_over() {
    let (app, passwords) = app().await;
    for _ in 0..5 {
        login(&app, "demo-pm", "wrong password!!").await;
    }
    sqlx::query("update app_user set locked_until = now() - interval '1 second' where name = 'demo-pm'")
        .execute(&app.state.db)
        .await
        .unwrap();
    // One more wrong guess after the lock does not lock again at once.
    let (status, _, _) = login(&app, "demo-pm", "wrong password!!").await;
    assert_eq!(status, 401);
    let (status, body, _) = login(&app, "demo-pm", &passwords["demo-pm"]).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_admin_unlocks_a_locked_account_and_a_configured_secure_cookie_is_secure() {
    let app = spawn_app_with(|s| {
        s.auth.open = false;
        s.auth.cookie_secure = true;
    })
    .await;
    let report = server::seed::demo_seed(&app.state.db).await.unwrap();
    let passwords: HashMap<String, String> =
        report.users.into_iter().map(|(name, _, password)| (name, password)).collect();
    for _ in 0..5 {
        login(&app, "demo-pm", "wrong password!!").await;
    }
    let (status, _, _) = login(&app, "demo-pm", &passwords["demo-pm"]).await;
    assert_eq!(status, 401, "locked");

    let admin = session(&app, &passwords, "admin").await;
    let (status, _, cookie) = login(&app, "demo-admin", &passwords["demo-admin"]).await;
    assert_eq!(status, 200);
    assert!(cookie.unwrap().contains("Secure"), "auth.cookie_secure marks the cookie Secure even over plain HTTP");
    let (status, body) = ui(&app, &admin, reqwest::Method::POST, "/api/v1/users/demo-pm/unlock", Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = login(&app, "demo-pm", &passwords["demo-pm"]).await;
    assert_eq!(status, 200, "unlocked");
    let (status, _) = ui(&app, &admin, reqwest::Method::POST, "/api/v1/users/nobody/unlock", Value::Null).await;
    assert_eq!(status, 404);
    let action: String =
        sqlx::query_scalar("select action from audit where entity = 'user:demo-pm' order by id desc limit 1")
            .fetch_one(&app.state.db)
            .await
            .unwrap();
    assert_eq!(action, "user.unlock");
}

#[tokio::test]
async fn the_command_lines_password_reset_opens_a_locked_account_ends_its_sessions_and_is_audited() {
    // Arrange: a signed-in viewer, locked out by a guesser afterwards; a disabled operator
    let (app, passwords) = app().await;
    let viewer = session(&app, &passwords, "viewer").await;
    for _ in 0..5 {
        login(&app, "demo-viewer", "wrong password!!").await;
    }
    let admin = session(&app, &passwords, "admin").await;
    let (status, body) =
        ui(&app, &admin, reqwest::Method::POST, "/api/v1/users/demo-operator/disable", Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let reset = |name: &'static str, password: &'static str, enable: bool| {
        let db = app.state.db.clone();
        async move {
            server::access::reset_password_audited(&db, name, password, enable, "tessera user reset-password").await
        }
    };

    // Act: what `tessera user reset-password NAME [--enable]` runs
    let viewer_reset = reset("demo-viewer", "a new password of the viewer", false).await.unwrap();
    let kept_disabled = reset("demo-operator", "a new password of the operator", false).await.unwrap();
    let disabled_sign_in = login(&app, "demo-operator", "a new password of the operator").await.0;
    let enabled = reset("demo-operator", "a new password of the operator", true).await.unwrap();
    let unknown = reset("nobody", "a new password of nobody", false).await;
    let short = reset("demo-pm", "short", false).await;

    // Assert: the new password opens a session, the old one and the old session do not
    assert_eq!(viewer_reset, (1, false), "the viewer's session ended");
    let (status, _) = ui(&app, &viewer, reqwest::Method::GET, "/api/v1/pools", Value::Null).await;
    assert_eq!(status, 401, "the old session is gone");
    assert_eq!(login(&app, "demo-viewer", &passwords["demo-viewer"]).await.0, 401);
    assert_eq!(login(&app, "demo-viewer", "a new password of the viewer").await.0, 200, "unlocked, new password");
    // A disabled user stays disabled unless --enable says otherwise.
    assert_eq!((kept_disabled, disabled_sign_in), ((0, false), 401));
    assert_eq!(enabled, (0, true));
    assert_eq!(login(&app, "demo-operator", "a new password of the operator").await.0, 200, "enabled again");
    assert!(matches!(unknown, Err(server::error::ApiError::NotFound(_))), "{unknown:?}");
    assert!(matches!(short, Err(server::error::ApiError::BadRequest { .. })), "{short:?}");
    assert_eq!(login(&app, "demo-pm", &passwords["demo-pm"]).await.0, 200, "a refused reset changes nothing");
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "select actor, action, entity from audit where actor = 'tessera user reset-password' order by id",
    )
    .fetch_all(&app.state.db)
    .await
    .unwrap();
    let rows: Vec<(&str, &str)> = rows.iter().map(|(_, action, entity)| (action.as_str(), entity.as_str())).collect();
    assert_eq!(
        rows,
        [
            ("user.password", "user:demo-viewer"),
            ("user.password", "user:demo-operator"),
            ("user.password", "user:demo-operator"),
            ("user.enable", "user:demo-operator"),
        ]
    );
}
