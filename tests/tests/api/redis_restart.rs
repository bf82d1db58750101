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
    let app = spawn_app_with(|s| s.redis_url = format!("redis://127.0.0.1:{port}").into()).await;
    server::seed::demo_seed(&app.state.db).await.unwrap();
    server::publish::drain_outbox(&app.state).await.unwrap();
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
