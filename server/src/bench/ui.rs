//! `tessera bench ui`: how long the admin UI's pages take to render on the server with a
//! deployment of a given size (by default 20 pools, 200 channels and the demo's 2 tenants,
//! the demo seed's among them, and an hour of samples; `--tenants 5000` for a large fleet),
//! from sending `GET /` to the last byte of the server-rendered page. An in-process server
//! in open mode (loopback only) on a database of its own, dropped afterwards.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::TimeDelta;
use serde::Serialize;
use serde_json::json;

use crate::cli::BenchUiArgs;
use crate::configuration::Settings;
use crate::state::AppState;

/// The figures `--json` prints: per page, the server's render time.
#[derive(Debug, Serialize)]
pub struct Report {
    pub pools: u32,
    pub channels: u32,
    pub tenants: u32,
    /// Samples stored per pool (one per 10 s of the hour before the run).
    pub samples_per_pool: u32,
    pub requests: u32,
    pub pages: Vec<PageTimes>,
    /// `GET /` (the dashboard): the target figure.
    pub dashboard_p50_ms: f64,
    pub dashboard_p99_ms: f64,
}

/// One page's render times.
#[derive(Debug, Serialize)]
pub struct PageTimes {
    pub path: String,
    pub bytes: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The pages measured, the dashboard first (then its data alone, without the page's
/// rendering).
const PAGES: [&str; 12] = [
    "/",
    "/sfn/dashboard",
    "/pools",
    "/pools?q=p0&sort=members",
    "/users",
    "/changes?state=applied",
    "/pools/p00",
    "/channels",
    "/tenants",
    "/tenants?q=t01&sort=tokens",
    "/tenants?page=2",
    "/tenants/acme",
];

/// Runs the benchmark; removes its database and keys afterwards.
pub async fn run(settings: &Settings, args: &BenchUiArgs) -> anyhow::Result<Report> {
    super::on_own_server(
        settings,
        "ui",
        false,
        |s| s.auth.open = true,
        |s| async move { measure(&s.state, &s.address, &s.token, args).await },
    )
    .await
}

async fn measure(state: &AppState, address: &str, token: &str, args: &BenchUiArgs) -> anyhow::Result<Report> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    // The demo seed (its pools, channels and tenants), then pools and channels of the
    // benchmark's own up to the sizes asked for.
    crate::seed::demo_seed(&state.db).await.context("seeding the demo configuration")?;
    let count = |table: &'static str| async move { crate::store::count_rows(&state.db, table).await.map(|n| n as u32) };
    let (seeded_pools, seeded_channels) = (count("pool").await?, count("channel").await?);
    anyhow::ensure!(args.pools > seeded_pools, "--pools must exceed the {seeded_pools} demo pools");
    let (new_pools, new_channels) = (args.pools - seeded_pools, args.channels.saturating_sub(seeded_channels));
    anyhow::ensure!(
        new_channels >= new_pools,
        "--channels must leave at least one channel for each pool beyond the demo's"
    );
    configure(&http, address, token, new_pools, new_channels).await?;
    let seeded_tenants = count("tenant").await?;
    add_tenants(&http, address, token, args.tenants.saturating_sub(seeded_tenants)).await?;
    crate::publish::drain_outbox(state).await.context("publishing the configuration")?;
    let pools = crate::samples::store::list_pools(&state.db).await?;
    let (pools_now, channels_now, tenants) = (count("pool").await?, count("channel").await?, count("tenant").await?);
    // An hour of samples, 10 s apart, with draws in between so the shares have windows.
    let start = chrono::Utc::now() - TimeDelta::hours(1);
    for round in 0..args.samples {
        for pool in &pools {
            for _ in 0..args.draws_per_sample {
                state.pools.draw(pool).await.with_context(|| format!("drawing from {pool}"))?;
            }
        }
        crate::samples::sampler::run_at(state, start + TimeDelta::seconds(10 * i64::from(round))).await?;
    }

    let mut pages = Vec::new();
    for path in PAGES {
        let url = format!("{address}{path}");
        // Warm-up: the first render loads templates and connections.
        for _ in 0..2 {
            fetch(&http, &url).await?;
        }
        let mut times = Vec::with_capacity(args.requests as usize);
        let mut bytes = 0;
        for _ in 0..args.requests {
            let started = Instant::now();
            bytes = fetch(&http, &url).await?;
            times.push(started.elapsed());
        }
        times.sort_unstable();
        let ms = |q: f64| super::quantile_us(&times, q) / 1000.0;
        pages.push(PageTimes { path: path.to_owned(), bytes, p50_ms: ms(0.5), p99_ms: ms(0.99), max_ms: ms(1.0) });
    }
    Ok(Report {
        pools: pools_now,
        channels: channels_now,
        tenants,
        samples_per_pool: args.samples,
        requests: args.requests,
        dashboard_p50_ms: pages[0].p50_ms,
        dashboard_p99_ms: pages[0].p99_ms,
        pages,
    })
}

/// The whole page: its size in bytes, or an error naming the status.
async fn fetch(http: &reqwest::Client, url: &str) -> anyhow::Result<usize> {
    let response = http.get(url).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    anyhow::ensure!(status.is_success(), "GET {url}: {status}");
    Ok(body.len())
}

/// `channels` channels `C000…` and `pools` pools `p00…` through the admin API, the
/// channels dealt out evenly (no channel in two pools).
async fn configure(
    http: &reqwest::Client,
    address: &str,
    token: &str,
    pools: u32,
    channels: u32,
) -> anyhow::Result<()> {
    for c in 0..channels {
        let code = format!("C{c:03}");
        let created = http
            .post(format!("{address}/api/v1/channels"))
            .bearer_auth(token)
            .json(&json!({"code": code, "name": format!("bench channel {code}"), "base_weight": 10 + c % 7}))
            .send()
            .await?;
        anyhow::ensure!(created.status().is_success(), "registering channel {code}: {}", created.status());
    }
    let per_pool = channels / pools;
    for p in 0..pools {
        let name = format!("p{p:02}");
        let weights: Vec<_> = (p * per_pool..(p + 1) * per_pool)
            .map(|c| json!({"member": format!("C{c:03}"), "weight": 10 + c % 7}))
            .collect();
        let snapshot = json!({
            "kind": "channels", "ordering": "smooth", "batch_size": 1024, "low_water": 128,
            "timezone": "UTC", "eject_rebuild_percent": 50, "weights": weights,
        });
        let created = http
            .put(format!("{address}/api/v1/pools/{name}"))
            .bearer_auth(token)
            .json(&json!({"snapshot": snapshot, "expected_version": 0}))
            .send()
            .await?;
        anyhow::ensure!(created.status().is_success(), "creating pool {name}: {}", created.status());
    }
    Ok(())
}

/// `count` tenants `t00000…` through the admin API (eight at a time), on the demo's plans
/// in turn.
async fn add_tenants(http: &reqwest::Client, address: &str, token: &str, count: u32) -> anyhow::Result<()> {
    use futures::StreamExt;
    let mut created = futures::stream::iter(0..count)
        .map(|t| async move {
            let name = format!("t{t:05}");
            let plan = if t % 2 == 0 { "pro" } else { "starter" };
            let reply = http
                .put(format!("{address}/api/v1/tenants/{name}"))
                .bearer_auth(token)
                .json(&json!({"plan": plan, "expected_version": 0}))
                .send()
                .await?;
            anyhow::ensure!(reply.status().is_success(), "creating tenant {name}: {}", reply.status());
            anyhow::Ok(())
        })
        .buffer_unordered(8);
    while let Some(result) = created.next().await {
        result?;
    }
    Ok(())
}

/// The report as a table for people.
pub fn render(r: &Report) -> String {
    let mut out = format!(
        "ui bench: server render time, {} pools, {} channels, {} tenants, {} samples a pool, {} requests a page\n",
        r.pools, r.channels, r.tenants, r.samples_per_pool, r.requests
    );
    for p in &r.pages {
        out.push_str(&format!(
            "{:<28} {:>8} bytes   p50 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms\n",
            p.path, p.bytes, p.p50_ms, p.p99_ms, p.max_ms
        ));
    }
    out
}
