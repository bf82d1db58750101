//! What the browser tests of the admin UI share: a server with access control on and the
//! demo users, waiting for hydration, reading text, signing in and out, screenshots (saved
//! under `target/screenshots/` for review).

use std::collections::HashMap;
use std::time::Duration;

use fantoccini::{Client, Locator};

use crate::{spawn_app_with, TestApp};

/// A server with access control on (not the open mode other tests use), seeded with the
/// demo data and one user per role; answers the users' passwords. With `publish`, the
/// seed is also delivered to Redis.
pub async fn app_with_users(publish: bool) -> (TestApp, HashMap<String, String>) {
    let app = spawn_app_with(|s| s.auth.open = false).await;
    assert!(
        app.settings.site_root.join("pkg/tessera.wasm").exists(),
        "no wasm bundle under {}: run `scripts/build --site target/site-test -- --tests` first (scripts/test does)",
        app.settings.site_root.display()
    );
    let report = server::seed::demo_seed(&app.state.db).await.unwrap();
    if publish {
        server::publish::drain_outbox(&app.state).await.unwrap();
    }
    let passwords = report.users.into_iter().map(|(name, _, password)| (name, password)).collect();
    (app, passwords)
}

/// Removes the demo seed's approval policy on cn-pay (through the policy store, audited),
/// for tests of the pool editors' direct writes.
pub async fn without_demo_policy(app: &TestApp) {
    let ctx = server::change::Ctx {
        actor: "test",
        source: server::audit::store::Source::System,
        reason: Some("direct writes under test"),
        request_id: None,
    };
    server::gate::policy::store::delete_policy(&app.state.db, &ctx, "pool:cn-pay", 1).await.unwrap();
}

pub async fn hydrated(c: &Client) {
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("body[data-hydrated='true']"))
        .await
        .expect("the page hydrates");
}

pub async fn text(c: &Client, id: &str) -> String {
    c.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}")).text().await.unwrap()
}

pub async fn screenshot(c: &Client, name: &str) {
    let dir = crate::workspace_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), c.screenshot().await.unwrap()).unwrap();
}

/// Signs in through the form and waits for the dashboard.
pub async fn sign_in(c: &Client, app: &TestApp, name: &str, password: &str) {
    // Once more after a navigation that timed out: on a loaded two-core machine Chromium's
    // renderer has missed the 30 s page-load budget of this first page (the 29 MB debug
    // bundle); a second timeout fails the test as before.
    let login = format!("{}/login", app.address);
    if let Err(e) = c.goto(&login).await {
        eprintln!("sign_in: opening {login} failed ({e}); trying once more");
        c.goto(&login).await.unwrap();
    }
    hydrated(c).await;
    c.find(Locator::Id("login-name")).await.unwrap().send_keys(name).await.unwrap();
    c.find(Locator::Id("login-password")).await.unwrap().send_keys(password).await.unwrap();
    c.find(Locator::Id("login-submit")).await.unwrap().click().await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Id("system-status"))
        .await
        .expect("signed in, the dashboard shows");
    // Settled before the test navigates on: leaving a page while its bundle is still being
    // instantiated has hung Chromium's renderer (chromium 156, now and then).
    hydrated(c).await;
    assert_eq!(text(c, "session-user").await, name);
}

pub async fn sign_out(c: &Client) {
    hydrated(c).await;
    c.find(Locator::Id("sign-out")).await.unwrap().click().await.unwrap();
    // Polled by hand: a look-up made while the browser is between the sign-out and the
    // sign-in page fails with "aborted by navigation" (once in a clean-clone run), which
    // WebDriver waits treat as final; any failure is tried again until the deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match c.find(Locator::Id("login-form")).await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() >= deadline => panic!("back at sign-in: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    // The sign-in page loaded anew: settled before the test navigates on (see sign_in).
    hydrated(c).await;
}

/// Signs in over HTTP, as a script forging requests would: the session cookie
/// (`name=value`) and its CSRF token.
pub async fn api_session(app: &TestApp, name: &str, password: &str) -> (String, String) {
    let login = app
        .request(reqwest::Method::POST, "/api/v1/auth/login")
        .json(&serde_json::json!({"name": name, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 200, "signing in {name} over HTTP");
    let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let csrf = login.json::<serde_json::Value>().await.unwrap()["csrf_token"].as_str().unwrap().to_owned();
    (cookie, csrf)
}

/// A person signed in over HTTP, as an API client: the session cookie and its CSRF token.
pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

impl Session {
    /// Signs `name` in over HTTP.
    pub async fn sign_in(app: &TestApp, name: &str, password: &str) -> Self {
        let (cookie, csrf) = api_session(app, name, password).await;
        Self { cookie, csrf }
    }

    /// A GET with the cookie: its status and JSON body.
    pub async fn get(&self, app: &TestApp, path: &str) -> (u16, serde_json::Value) {
        crate::json_reply(app.request(reqwest::Method::GET, path).header("cookie", &self.cookie)).await
    }

    /// Sends a request with the cookie, the CSRF token and the app's own origin.
    pub async fn send(
        &self,
        app: &TestApp,
        method: reqwest::Method,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let request = app
            .request(method, path)
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf)
            .header("origin", &app.address);
        crate::json_reply(crate::with_json(request, &body)).await
    }
}

/// Waits (up to 20 s: pages that refresh themselves do so every 5 s) until the element
/// `id` reads `expected`.
pub async fn wait_text(c: &Client, id: &str, expected: &str) {
    let mut last = String::new();
    for _ in 0..200 {
        if let Ok(element) = c.find(Locator::Id(id)).await {
            last = element.text().await.unwrap_or_default();
            if last == expected {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("#{id} reads {last:?}, not {expected:?}");
}

/// Waits until the element `id` holds some text, and answers it.
pub async fn wait_for_text(c: &Client, id: &str) -> String {
    let xpath = format!("//*[@id='{id}' and string-length(normalize-space(.)) > 0]");
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|e| panic!("#{id} says something: {e}"))
        .text()
        .await
        .unwrap()
}

/// Moves the pointer over `element` (its centre), as a person hovering it: CSS `:hover`
/// applies, which a script's synthetic events would not do.
pub async fn hover(c: &Client, element: &fantoccini::elements::Element) {
    use fantoccini::actions::{InputSource, MouseActions, PointerAction};
    let actions = MouseActions::new("mouse".to_owned()).then(PointerAction::MoveToElement {
        element: element.clone(),
        duration: None,
        x: 0.0,
        y: 0.0,
    });
    c.perform_actions(actions).await.expect("moving the pointer");
}

/// What shows when the pointer rests on the element `band` (CSS): the text of `tip` (CSS)
/// once it is displayed. Tried again for up to 10 s, as pages that read themselves again
/// every few seconds may replace the chart between the move and the read.
pub async fn hover_text(c: &Client, band: &str, tip: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let attempt = async {
            let target = c.find(Locator::Css(band)).await.ok()?;
            hover(c, &target).await;
            let shown = c.find(Locator::Css(tip)).await.ok()?;
            if shown.is_displayed().await.ok()? {
                shown.text().await.ok()
            } else {
                None
            }
        };
        if let Some(text) = attempt.await {
            return text;
        }
        assert!(std::time::Instant::now() < deadline, "{tip} did not show on hovering {band}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// axe-core's serious and critical violations on the page shown (the npm package, which
/// scripts/test installs under `.tools/`), each as `rule: help — the first elements`.
pub async fn axe_violations(c: &Client) -> Vec<String> {
    let path = crate::workspace_root().join(".tools/npm/node_modules/axe-core/axe.min.js");
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test installs axe-core there)", path.display()));
    c.execute(&format!("{source}\nreturn typeof axe;"), vec![]).await.expect("injecting axe-core");
    let run = "const done = arguments[arguments.length - 1];
        axe.run(document, { resultTypes: ['violations'] }).then(r => done(r.violations
            .filter(v => v.impact === 'serious' || v.impact === 'critical')
            .map(v => v.id + ' (' + v.impact + '): ' + v.help + ' — '
                + v.nodes.slice(0, 4).map(n => n.target.join(' ')).join(', '))),
            e => done(['axe failed: ' + e]));";
    let found = c.execute_async(run, vec![]).await.expect("running axe-core");
    serde_json::from_value(found).expect("axe's answer is a list of strings")
}

/// What does not fit on the page shown: the page scrolling sideways, a card wider than its
/// box, a chart's text (ticks, labels, marks, titles) outside its chart or time ticks that
/// overlap, and any SVG text outside its figure (or its SVG, outside a figure). Empty when everything fits.
pub async fn overflows(c: &Client) -> Vec<String> {
    let script = "const bad = [];
        const visible = e => getComputedStyle(e).display !== 'none' && e.getClientRects().length > 0;
        const outside = (r, box) => r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1;
        const d = document.documentElement;
        if (d.scrollWidth > d.clientWidth + 1) bad.push('the page scrolls sideways: ' + d.scrollWidth + ' > ' + d.clientWidth);
        document.querySelectorAll('.card').forEach(e => {
            if (e.scrollWidth > e.clientWidth + 1) {
                const right = e.getBoundingClientRect().right;
                const wide = [...e.querySelectorAll('*')].filter(k => k.getBoundingClientRect().right > right + 1)
                    .slice(0, 3).map(k => k.tagName.toLowerCase() + (k.id ? '#' + k.id : '') + (k.className && k.className.baseVal === undefined ? '.' + k.className : ''));
                bad.push('card ' + (e.id || e.getAttribute('aria-labelledby') || e.className) + ': ' + e.scrollWidth + ' > ' + e.clientWidth + ' (' + wide.join(', ') + ')');
            } });
        document.querySelectorAll('figure.plot').forEach(f => {
            const box = f.getBoundingClientRect();
            f.querySelectorAll('.plot-tick, .plot-rule-label, .plot-mark, .plot-axis-title, figcaption').forEach(t => {
                if (visible(t) && outside(t.getBoundingClientRect(), box)) bad.push(f.id + ': \"' + t.textContent + '\" outside its chart'); });
            const ticks = [...f.querySelectorAll('.plot-x .plot-tick')].filter(visible).map(t => t.getBoundingClientRect());
            for (let i = 1; i < ticks.length; i++) if (ticks[i].left < ticks[i - 1].right) bad.push(f.id + ': time ticks overlap');
        });
        document.querySelectorAll('svg text').forEach(t => {
            const box = (t.closest('figure') || t.ownerSVGElement).getBoundingClientRect();
            if (visible(t) && outside(t.getBoundingClientRect(), box)) bad.push('svg text \"' + t.textContent + '\" outside its figure'); });
        return bad;";
    serde_json::from_value(c.execute(script, vec![]).await.expect("measuring the page")).unwrap()
}
