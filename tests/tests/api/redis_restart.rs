//! A real Redis of its own (a `redis-server` on a loopback port of this test, no
//! persistence) killed and restarted empty while HTTP draws run: every draw answers 200
//! (served locally while Redis is away or lacks the pool), and draws are served by Redis
//! again within 5 s of its return (issue 15's target).

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use integration::{json_reply, spawn_app_with};
use serde_json::Value;

/// A `redis-server` child process, killed when dropped.
struct OwnRedis {
    port: u16,
    child: Child,
}

impl OwnRedis {
    fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test installs it)");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server on port {port} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { port, child }
    }

    fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_and_restarted_empty_under_http_draws_loses_no_draw_and_serves_again_within_5_s() {
    let port = free_port();
    let mut redis = OwnRedis::start(port);
    let app = spawn_app_with(|s| integration::use_redis(s, &format!("redis://127.0.0.1:{port}"))).await;
    integration::seed_demo(&app).await;
    let scheduler = server::jobs::Scheduler::start(app.state.clone()).await.unwrap();

    // Draws until the pool is served by Redis (the refiller filled it).
    let draw = |app: &integration::TestApp| {
        let request = app.request(reqwest::Method::POST, "/api/v1/pools/cn-pay/draw").timeout(Duration::from_secs(10));
        json_reply(request)
    };
    let started = Instant::now();
    loop {
        let (status, body) = draw(&app).await;
        if status == 200 && body["source"] == "redis" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never served by redis: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Two workers draw throughout; every answer is kept with its time.
    let answers: Arc<Mutex<Vec<(Instant, u16, Value)>>> = Arc::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (http, address, answers, stopped) =
            (app.http.clone(), app.address.clone(), answers.clone(), stopped.clone());
        workers.push(tokio::spawn(async move {
            while !*stopped.borrow() {
                let request = http.post(format!("{address}/api/v1/pools/cn-pay/draw")).timeout(Duration::from_secs(10));
                let (status, body) = json_reply(request).await;
                answers.lock().unwrap().push((Instant::now(), status, body));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _restarted = OwnRedis::start(redis.port);
    let back_at = Instant::now();
    // Until a draw started after the restart comes from Redis again, at most 15 s.
    loop {
        let served = answers.lock().unwrap().iter().any(|(at, _, body)| *at > back_at && body["source"] == "redis");
        if served || back_at.elapsed() > Duration::from_secs(15) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(true).unwrap();
    for w in workers {
        w.await.unwrap();
    }
    scheduler.shutdown().await;

    let answers = answers.lock().unwrap();
    let not_ok: Vec<String> =
        answers.iter().filter(|(_, status, _)| *status != 200).map(|(_, s, b)| format!("{s} {b}")).collect();
    assert!(
        not_ok.is_empty(),
        "{} of {} draws failed, first: {:?}",
        not_ok.len(),
        answers.len(),
        &not_ok[..not_ok.len().min(3)]
    );
    assert!(answers.iter().any(|(_, _, b)| b["source"] == "local"), "served locally while redis was away");
    let back = answers
        .iter()
        .find(|(at, _, b)| *at > back_at && b["source"] == "redis")
        .map(|(at, _, _)| *at - back_at)
        .expect("served by redis again after the restart");
    eprintln!("{} draws, all 200; served by redis {} ms after the restart", answers.len(), back.as_millis());
    assert!(back <= Duration::from_secs(5), "served by redis again only after {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_made_while_redis_is_away_survive_a_serve_restart_and_are_settled_in_the_ledger_when_it_returns() {
    const TOKEN: &str = "restart-admin-token-0123456789";
    let port = free_port();
    let mut redis = OwnRedis::start(port);
    let app = spawn_app_with(|s| {
        integration::use_redis(s, &format!("redis://127.0.0.1:{port}"));
        s.admin = Some(server::configuration::AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
    })
    .await;
    let send = |app: &integration::TestApp, method: reqwest::Method, path: &str, body: Value| {
        let request = app.request(method, path).bearer_auth(TOKEN).timeout(Duration::from_secs(10));
        integration::json_reply(integration::with_json(request, &body))
    };
    let plan = serde_json::json!({"name": "pro", "monthly_tokens": 100000, "daily_requests": 1000, "concurrency": 100});
    assert_eq!(send(&app, reqwest::Method::POST, "/api/v1/plans", plan).await.0, 201);
    let tenant = serde_json::json!({"plan": "pro", "expected_version": 0, "reason": "test",
        "fallback": {"policy": "fail_open_limited", "allowance": 10000}});
    assert_eq!(send(&app, reqwest::Method::PUT, "/api/v1/tenants/acme", tenant).await.0, 200);
    let reserve = |app: &integration::TestApp, rid: &str, tokens: u64| {
        send(
            app,
            reqwest::Method::POST,
            "/api/v1/tenants/acme/quota/reserve",
            serde_json::json!({"request_id": rid, "tokens": tokens}),
        )
    };
    let settle = |app: &integration::TestApp, rid: &str, actual: u64| {
        send(
            app,
            reqwest::Method::POST,
            "/api/v1/tenants/acme/quota/settle",
            serde_json::json!({"request_id": rid, "actual_tokens": actual}),
        )
    };
    // The jobs run as under `tessera serve`, and stop with the process.
    let first_jobs = server::jobs::Scheduler::start(app.state.clone()).await.unwrap();
    assert_eq!(reserve(&app, "warm", 10).await.1["source"], "redis");
    assert_eq!(settle(&app, "warm", 10).await.0, 200);

    // Redis goes away: three admissions by the fallback policy, two of them settled.
    redis.kill();
    for (rid, tokens) in [("r1", 100), ("r2", 200), ("r3", 300)] {
        let (status, body) = reserve(&app, rid, tokens).await;
        assert_eq!((status, body["source"].as_str()), (200, Some("fallback")), "{body}");
    }
    for (rid, actual) in [("r1", 50), ("r2", 150)] {
        let (status, body) = settle(&app, rid, actual).await;
        assert_eq!(status, 200, "{body}");
    }

    // The process restarts while Redis is still away (its jobs stop with it, writing the
    // settles it made to the ledger); the third admission is settled by the new process,
    // from the journal it read back.
    first_jobs.shutdown().await;
    let app = integration::restart(app).await;
    assert_eq!(app.state.quotas.offline_summary().operations, 3);
    let (status, body) = settle(&app, "r3", 250).await;
    assert_eq!((status, body["source"].as_str()), (200, Some("fallback")), "{body}");

    // Redis returns (empty: no persistence here); the jobs charge the journal and drain.
    let _back = OwnRedis::start(port);
    let scheduler = server::jobs::Scheduler::start(app.state.clone()).await.unwrap();
    let started = Instant::now();
    let settled = loop {
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(
            "select request_id, actual from usage_ledger where tenant = 'acme' and outcome = 'settled' order by request_id",
        )
        .fetch_all(&app.state.db)
        .await
        .unwrap();
        if rows.len() == 4 || started.elapsed() > Duration::from_secs(30) {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    scheduler.shutdown().await;
    eprintln!("every offline admission in the ledger {} ms after redis returned", started.elapsed().as_millis());
    let expected: Vec<(String, Option<i64>)> =
        [("r1", 50), ("r2", 150), ("r3", 250), ("warm", 10)].iter().map(|(r, a)| (r.to_string(), Some(*a))).collect();
    assert_eq!(settled, expected);
    assert_eq!(app.state.quotas.offline_summary().operations, 0, "the journal is empty");
}
