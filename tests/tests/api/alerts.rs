//! The alert rules, their unit tests and the Grafana dashboard in `ops/` against the
//! server's `/metrics`: every metric they name is one the server exports.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::TimeDelta;
use client::pool::PoolName;
use integration::{spawn_app, workspace_root, TestApp};
use server::samples::sampler as pool_sampler;

/// The files whose metric names must exist, relative to the workspace root.
const FILES: [&str; 3] =
    ["ops/prometheus/tessera-alerts.yml", "ops/prometheus/tessera-alerts.test.yml", "ops/grafana/tessera.json"];

/// Every metric name (`tessera_…`) written in `text`: in expressions, series, templates
/// and comments alike (group names and file names use dots and dashes, never `tessera_`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let is_name_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let mut names = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("tessera_") {
        let start = from + found;
        let end = text[start..].find(|c: char| !is_name_char(c)).map_or(text.len(), |n| start + n);
        // Part of a longer word (`x_tessera_y`, a recording rule `job:tessera_…`): not a name.
        let inside =
            text[..start].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if !inside {
            names.insert(text[start..end].to_owned());
        }
        from = end;
    }
    names
}

/// The metric families of a Prometheus text exposition, by name, with their type (from
/// the `# TYPE name type` lines).
fn exported_families(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
        .collect()
}

/// The names in `used` that no family in `exported` answers to: a histogram's (or a
/// summary's) `_bucket`, `_sum` and `_count` series count as its family, another type's do
/// not.
fn unexported(used: &BTreeSet<String>, exported: &BTreeMap<String, String>) -> Vec<String> {
    let answered = |name: &str| {
        exported.contains_key(name)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .any(|family| exported.get(family).is_some_and(|kind| kind == "histogram" || kind == "summary"))
    };
    used.iter().filter(|name| !answered(name)).cloned().collect()
}

/// The `/metrics` text once the app has produced a series of every family the rules read
/// (prometheus omits a labelled family with no series yet): requests and readiness checks,
/// draws, two pool samples a minute apart, a health evaluation, a drain of the draw log, an
/// outcome report, a reservation and its settle, a refused reservation, and the scheduler's first runs (job leadership and run outcomes).
async fn metrics_with_every_series(app: &TestApp) -> String {
    assert_eq!(app.get("/readyz").await.status(), 200);
    integration::seed_demo(app).await;

    // A refill run (its duration and failure series per pool).
    server::jobs::pool_refill::run_once(&app.state).await.unwrap();
    let now = app.state.pool_admin.now().await.unwrap();
    pool_sampler::run_at(&app.state, now - TimeDelta::seconds(60)).await.unwrap();
    let pool = PoolName::parse("cn-pay").unwrap();
    for _ in 0..20 {
        app.state.pools.draw(&pool).await.unwrap();
    }
    let sampled = pool_sampler::run_at(&app.state, now).await.unwrap();
    assert_eq!(sampled.failed, 0, "{sampled:?}");
    server::jobs::health::run_once(&app.state, now).await.unwrap();
    let drained = server::jobs::draw_log::run_at(&app.state, now).await.unwrap();
    assert_eq!((drained.draws, drained.failed), (20, 0), "{drained:?}");

    // A channel's outcome report, a reservation and its settle.
    let (status, reply) = app
        .post_json(
            "/api/v1/channels/ALIPAY_A/outcomes",
            serde_json::json!({"ok": 9, "fail": 1, "latency_ms_sum": 150, "latency_count": 9, "latencies_ms": [30]}),
        )
        .await;
    assert_eq!(status, 202, "{reply}");
    let (status, reply) = app
        .post_json("/api/v1/tenants/acme/quota/reserve", serde_json::json!({"request_id": "m-1", "tokens": 100}))
        .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = app
        .post_json("/api/v1/tenants/acme/quota/settle", serde_json::json!({"request_id": "m-1", "actual_tokens": 80}))
        .await;
    assert_eq!(status, 200, "{reply}");
    // A reservation refused (the refusals by tenant).
    let (status, reply) = app
        .post_json(
            "/api/v1/tenants/acme/quota/reserve",
            serde_json::json!({"request_id": "m-2", "tokens": 1_000_000_000u64}),
        )
        .await;
    assert_eq!(reply["result"], "refused", "{status} {reply}");

    let scheduler = server::jobs::Scheduler::start(app.state.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = app.get("/metrics").await.text().await.unwrap();
        if text.contains("tessera_job_runs_total{") {
            break;
        }
        assert!(Instant::now() < deadline, "no job ran within 20 s of the scheduler's start:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    scheduler.shutdown().await;
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test]
async fn every_metric_the_alert_rules_and_the_dashboard_name_is_exported() {
    let app = spawn_app().await;
    let exported = exported_families(&metrics_with_every_series(&app).await);

    for file in FILES {
        let text = std::fs::read_to_string(workspace_root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let used = metric_names(&text);
        // The scan finds what the files are about (an empty scan would pass vacuously).
        assert!(used.contains("tessera_job_leader"), "{file}: {used:?}");
        let missing = unexported(&used, &exported);
        assert!(
            missing.is_empty(),
            "{file} names metrics the server does not export: {missing:?}\nexported: {:?}",
            exported.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_name_the_server_does_not_export_is_reported() {
    let exposition = "# HELP tessera_http_request_duration_seconds HTTP request latency\n\
                      # TYPE tessera_http_request_duration_seconds histogram\n\
                      tessera_http_request_duration_seconds_count{method=\"GET\",route=\"/readyz\"} 1\n\
                      # HELP tessera_job_leader 1 while this instance leads the job\n\
                      # TYPE tessera_job_leader gauge\n\
                      tessera_job_leader{job=\"outbox\"} 1\n";
    let rules = "expr: histogram_quantile(0.99, rate(tessera_http_request_duration_seconds_bucket[5m]))\n\
                 expr: max by (job) (tessera_job_leader) < 1 or tessera_job_leader_count > 0\n\
                 expr: tessera_made_up_total > 0 and on (pool) job:tessera_recorded:sum";
    let used = metric_names(rules);
    assert_eq!(
        used.iter().map(String::as_str).collect::<Vec<_>>(),
        [
            "tessera_http_request_duration_seconds_bucket",
            "tessera_job_leader",
            "tessera_job_leader_count",
            "tessera_made_up_total"
        ]
    );
    let missing = unexported(&used, &exported_families(exposition));
    assert_eq!(missing, ["tessera_job_leader_count", "tessera_made_up_total"]);
}

/// Each alert rule's `runbook_url`, by alert, read line by line from the rule file.
fn runbook_urls(rules: &str) -> BTreeMap<String, Option<String>> {
    let mut urls = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in rules.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            current = Some(name.trim().to_owned());
            urls.insert(name.trim().to_owned(), None);
        } else if let (Some(url), Some(name)) = (line.strip_prefix("runbook_url: "), &current) {
            urls.insert(name.clone(), Some(url.trim_matches('"').to_owned()));
        }
    }
    urls
}

#[test]
fn every_alert_links_its_own_runbook_section_and_every_section_is_an_alert() {
    let read =
        |file: &str| std::fs::read_to_string(workspace_root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let urls = runbook_urls(&read("ops/prometheus/tessera-alerts.yml"));
    let sections: BTreeSet<String> = read("docs/runbook.md")
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .map(|title| title.trim().to_owned())
        .collect();

    assert!(urls.len() >= 25, "{urls:?}");
    for (alert, url) in &urls {
        assert_eq!(url.as_deref(), Some(format!("docs/runbook.md#{}", alert.to_lowercase()).as_str()), "{alert}");
        assert!(sections.contains(alert), "docs/runbook.md has no section ### {alert}");
    }
    let strays: Vec<_> = sections.iter().filter(|s| !urls.contains_key(*s)).collect();
    assert!(strays.is_empty(), "runbook sections that are no alert: {strays:?}");
}
