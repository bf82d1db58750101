//! `tessera bench publish`: how long an admin weight change takes to reach Redis — from
//! sending `POST /api/v1/pools/{pool}/weights` to the pool's meta hash holding the new
//! version. Runs an in-process server on a database of its own (created and dropped: the
//! audit trail is append-only, so a benchmark must not write into a real one).

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::cli::BenchPublishArgs;
use crate::configuration::Settings;

/// The figures `--json` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub changes: u32,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Runs the benchmark; removes its database and keys afterwards.
pub async fn run(settings: &Settings, args: &BenchPublishArgs) -> anyhow::Result<Report> {
    super::on_own_server(
        settings,
        "publish",
        false,
        |_| {},
        |s| async move { measure(&s.state, &s.address, &s.token, args.changes).await },
    )
    .await
}

async fn measure(state: &crate::state::AppState, address: &str, token: &str, changes: u32) -> anyhow::Result<Report> {
    let http = reqwest::Client::new();
    let pool_url = format!("{address}/api/v1/pools/bench");
    let snapshot = json!({
        "kind": "channels", "ordering": "smooth", "batch_size": 1024, "low_water": 128,
        "timezone": "UTC", "eject_rebuild_percent": 50,
        "weights": [{"member": "A", "weight": 50}, {"member": "B", "weight": 50}]
    });
    for member in ["A", "B"] {
        let registered = http
            .post(format!("{address}/api/v1/channels"))
            .bearer_auth(token)
            .json(&json!({"code": member, "name": format!("bench channel {member}"), "base_weight": 50}))
            .send()
            .await?;
        anyhow::ensure!(registered.status().is_success(), "registering channel {member}: {}", registered.status());
    }
    let created = http
        .put(&pool_url)
        .bearer_auth(token)
        .json(&json!({"snapshot": snapshot, "expected_version": 0}))
        .send()
        .await?;
    anyhow::ensure!(created.status().is_success(), "creating the benchmark pool: {}", created.status());
    let mut conn = state.redis.connection().await?;
    let meta = state.keys.pool_meta("bench");
    let mut latencies = Vec::with_capacity(changes as usize);
    for i in 1..=i64::from(changes) {
        let share = 40 + (i % 20) as u64;
        let body = json!({
            "weights": [{"member": "A", "weight": share}, {"member": "B", "weight": 100 - share}],
            "mode": "drain", "reason": "benchmark", "expected_version": i,
        });
        let started = Instant::now();
        let response = http.post(format!("{pool_url}/weights")).bearer_auth(token).json(&body).send().await?;
        anyhow::ensure!(response.status().is_success(), "weight change {i}: {}", response.status());
        // Done when Redis holds the new version (normally already on the response).
        loop {
            let version: Option<i64> = redis::cmd("HGET").arg(&meta).arg("version").query_async(&mut conn).await?;
            if version == Some(i + 1) {
                break;
            }
            anyhow::ensure!(started.elapsed() < Duration::from_secs(10), "version {} never reached redis", i + 1);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        latencies.push(started.elapsed());
    }
    latencies.sort_unstable();
    let ms = |q: f64| super::quantile_us(&latencies, q) / 1000.0;
    Ok(Report { changes, p50_ms: ms(0.5), p99_ms: ms(0.99), max_ms: ms(1.0) })
}

/// The report as a table for people.
pub fn render(r: &Report) -> String {
    format!(
        "publish bench: {} admin weight changes, HTTP request to Redis meta updated\n\
         p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms   (target p99 < 50 ms)\n",
        r.changes, r.p50_ms, r.p99_ms, r.max_ms
    )
}
