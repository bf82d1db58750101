//! Adaptive tiers against real Postgres and Redis: a tiers pool's tier policy set over
//! HTTP, outcomes recorded under a hand-set clock, and the `tier_rating` job called
//! through `run_once` at the end of each window.

use chrono::{DateTime, Duration, TimeZone, Utc};
use integration::{hold_jobs, spawn_app_with, HeldJobs, TestApp};
use reqwest::Method;
use serde_json::{json, Value};
use server::configuration::AdminAccess;

const TOKEN: &str = "tiers-admin-token-0123456789";

struct Bench {
    app: TestApp,
    clock: client::Clock,
    outcomes: client::Outcomes,
    _jobs: HeldJobs,
}

/// An instant on a window boundary, far from now, so nothing else writes there.
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 3, 4, 5, 0, 0).unwrap()
}

fn minute(n: i64) -> DateTime<Utc> {
    t0() + Duration::minutes(n)
}

/// Channels G1, G2 (tier G) and N1 (tier N); pool `t`: tier G 60, tier N 40.
async fn bench() -> Bench {
    let app = spawn_app_with(|s| {
        s.admin = Some(AdminAccess { token: TOKEN.to_owned().into(), actor: "ops-bot".into() });
        s.auth.open = false;
    })
    .await;
    let jobs = hold_jobs(&app, &["tier_rating"]).await;
    let clock = client::Clock::manual(t0());
    let outcomes = client::Outcomes::new(app.state.redis.clone(), app.state.keys.clone(), clock.clone(), None);
    for (code, tier) in [("G1", "G"), ("G2", "G"), ("N1", "N")] {
        let (status, reply) = app
            .send(
                Method::POST,
                "/api/v1/channels",
                Some(TOKEN),
                json!({"code": code, "name": code, "tier": tier, "base_weight": 1}),
            )
            .await;
        assert_eq!(status, 201, "{reply}");
    }
    let (status, reply) = app
        .send(
            Method::PUT,
            "/api/v1/pools/t",
            Some(TOKEN),
            json!({
                "snapshot": {"kind": "tiers", "ordering": "smooth", "batch_size": 100, "low_water": 10, "timezone": "UTC",
                             "eject_rebuild_percent": 90,
                             "weights": [{"member": "G", "weight": 60}, {"member": "N", "weight": 40}],
                             "tiers": {"G": [{"member": "G1", "weight": 1}, {"member": "G2", "weight": 1}],
                                       "N": [{"member": "N1", "weight": 1}]}},
                "expected_version": 0,
            }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    Bench { app, clock, outcomes, _jobs: jobs }
}

async fn set_policy(b: &Bench, pool: &str, policy: Value) -> (u16, Value) {
    b.app
        .send(
            Method::PUT,
            &format!("/api/v1/pools/{pool}/tier_policy"),
            Some(TOKEN),
            json!({"policy": policy, "reason": "re-rate by success"}),
        )
        .await
}

/// Records a window's outcomes (in its second minute) for each channel at the rate given.
async fn window(b: &Bench, index: i64, rates: &[(&str, f64)]) {
    b.clock.set(minute(index * 5 + 1));
    for (channel, rate) in rates {
        let code = client::health::ChannelCode::parse(channel).unwrap();
        let ok = (rate * 100.0).round() as u64;
        let counts = client::health::OutcomeCounts { ok, fail: 100 - ok, latency_ms_sum: 0, latency_count: 0 };
        b.outcomes.record_counts(&code, &counts).await.unwrap();
    }
}

/// Runs the job just after window `index` ends.
async fn judge(b: &Bench, index: i64) -> server::tiers::Report {
    server::jobs::tier_rating::run_once(&b.app.state, minute((index + 1) * 5) + Duration::seconds(6)).await.unwrap()
}

async fn tiers_of(b: &Bench) -> Value {
    let (status, pool) = b.app.send(Method::GET, "/api/v1/pools/t", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200, "{pool}");
    pool["snapshot"]["tiers"].clone()
}

async fn adaptive(b: &Bench) -> Value {
    let (status, reply) = b.app.send(Method::GET, "/api/v1/pools/t/tier_policy", Some(TOKEN), Value::Null).await;
    assert_eq!(status, 200, "{reply}");
    reply
}

fn channel<'a>(reply: &'a Value, code: &str) -> &'a Value {
    reply["channels"].as_array().unwrap().iter().find(|c| c["channel"] == code).unwrap()
}

fn names(tier: &Value) -> Vec<String> {
    tier.as_array().map(|a| a.iter().map(|m| m["member"].as_str().unwrap().to_owned()).collect()).unwrap_or_default()
}

const POLICY: fn(&str) -> Value = |mode| {
    json!({"mode": mode, "window_minutes": 5, "min_volume": 50, "good_at_least": 0.95, "normal_at_least": 0.8,
           "margin": 0.02, "windows": 3, "cooldown_ms": 1_800_000})
};

#[tokio::test]
async fn automatic_mode_moves_a_channel_failing_for_n_windows_from_g_to_n_and_not_earlier() {
    let b = bench().await;
    let (status, reply) = set_policy(&b, "t", POLICY("automatic")).await;
    assert_eq!(status, 200, "{reply}");
    // G1 fails (80 %), G2 hovers just inside G (94 % ≥ 95 % − 2 %), N1 just short of
    // climbing (96 % < 95 % + 2 %), then falls to 50 %: towards U, which the pool has no
    // weight for.
    let rates = |n1: f64| [("G1", 0.8), ("G2", 0.94), ("N1", n1)];
    for index in 0..2 {
        window(&b, index, &rates(0.96)).await;
        let report = judge(&b, index).await;
        assert_eq!((report.judged, report.applied.len()), (3, 0), "window {index}: {report:?}");
    }
    let said = adaptive(&b).await;
    assert_eq!(channel(&said, "G1")["direction"], "down");
    assert_eq!(channel(&said, "G1")["rates"], json!([0.8, 0.8]));
    assert_eq!(channel(&said, "G2")["direction"], Value::Null, "hysteresis holds G2 in G: {said}");
    assert_eq!(channel(&said, "N1")["direction"], Value::Null, "and N1 in N");
    assert_eq!(names(&tiers_of(&b).await["G"]), ["G1", "G2"], "two windows are not enough");
    assert_eq!(judge(&b, 1).await.judged, 0, "a window is judged once");

    window(&b, 2, &rates(0.5)).await;
    let report = judge(&b, 2).await;
    assert_eq!(report.applied.len(), 1, "{report:?}");
    assert!(report.applied[0].starts_with("t/G1: tier G → N: success 80.0%, 80.0%, 80.0%"), "{report:?}");
    let tiers = tiers_of(&b).await;
    assert_eq!(
        (names(&tiers["G"]), names(&tiers["N"])),
        (vec!["G2".to_owned()], vec!["N1".to_owned(), "G1".to_owned()])
    );
    let (_, g1) = b.app.send(Method::GET, "/api/v1/channels/G1", Some(TOKEN), Value::Null).await;
    assert_eq!(g1["tier"], "N", "the channel's registration moves with it: {g1}");
    let name = client::pool::PoolName::parse("t").unwrap();
    let published = b.app.state.pool_admin.snapshot(&name).await.unwrap().expect("published");
    assert!(published.tiers[&engine::Tier::N].index_of("G1").is_some(), "published: {published:?}");

    // Audited as health's change, with the measured rates.
    let rows: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "select actor, source, entity, reason from audit where action in ('pool.tier', 'channel.tier') order by id",
    )
    .fetch_all(&b.app.state.db)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r.0 == "health" && r.1 == "health"), "{rows:?}");
    assert_eq!((rows[0].2.as_str(), rows[1].2.as_str()), ("channel:G1", "pool:t"), "{rows:?}");
    assert!(rows[1].3.as_deref().unwrap().contains("80.0%, 80.0%, 80.0% in 3 consecutive windows of 5 min"));

    let said = adaptive(&b).await;
    let applied = &said["moves"][0];
    assert_eq!((applied["channel"].as_str(), applied["state"].as_str()), (Some("G1"), Some("applied")), "{said}");
    assert_eq!(applied["rates"], json!([0.8, 0.8, 0.8]));
    assert!(applied["audit_id"].as_i64().is_some());
    assert_eq!(channel(&said, "G1")["tier"], "N");

    // Two more windows of N1 at 50 %: a move to U, which the pool cannot take: not
    // applied, left open with the rule.
    for index in 3..5 {
        window(&b, index, &[("G1", 0.8), ("G2", 0.94), ("N1", 0.5)]).await;
        judge(&b, index).await;
    }
    let report = judge(&b, 4).await;
    assert_eq!(report.judged, 0);
    let said = adaptive(&b).await;
    let refused = said["moves"].as_array().unwrap().iter().find(|m| m["channel"] == "N1").expect("a move of N1");
    assert_eq!(refused["state"], "open", "{said}");
    assert!(refused["note"].as_str().unwrap().contains("tier U is not in weights"), "{refused}");
    assert_eq!(names(&tiers_of(&b).await["N"]), ["N1", "G1"], "nothing changed");
    assert_eq!(channel(&said, "G1")["direction"], Value::Null, "80 % is inside N: G1 stays");
}

#[tokio::test]
async fn suggest_mode_changes_nothing_until_a_person_accepts() {
    let b = bench().await;
    let (status, reply) = set_policy(&b, "t", POLICY("suggest")).await;
    assert_eq!(status, 200, "{reply}");
    for index in 0..3 {
        window(&b, index, &[("G1", 0.6), ("G2", 0.99), ("N1", 0.9)]).await;
        judge(&b, index).await;
    }
    let said = adaptive(&b).await;
    let offered = said["moves"][0].clone();
    assert_eq!((offered["channel"].as_str(), offered["state"].as_str()), (Some("G1"), Some("open")), "{said}");
    assert_eq!((offered["from"].as_str(), offered["to"].as_str()), (Some("G"), Some("N")));
    assert_eq!(names(&tiers_of(&b).await["G"]), ["G1", "G2"], "a suggestion changes nothing");
    // Within the cool-down the move is not offered again.
    for index in 3..6 {
        window(&b, index, &[("G1", 0.6)]).await;
        assert!(judge(&b, index).await.offered.is_empty());
    }
    assert_eq!(adaptive(&b).await["moves"].as_array().unwrap().len(), 1);

    let id = offered["id"].as_i64().unwrap();
    let path = |id: &str, what: &str| format!("/api/v1/pools/t/tier_moves/{id}/{what}");
    let (status, reply) = b.app.send(Method::POST, &path("abc", "accept"), Some(TOKEN), json!({"reason": "yes"})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("id")), "{reply}");
    let (status, reply) =
        b.app.send(Method::POST, &path("999999", "accept"), Some(TOKEN), json!({"reason": "yes"})).await;
    assert_eq!(status, 404, "{reply}");
    let (status, reply) = b.app.send(Method::POST, &path(&id.to_string(), "accept"), Some(TOKEN), json!({})).await;
    assert_eq!(status, 400, "a reason is required: {reply}");
    let (status, reply) = b
        .app
        .send(Method::POST, &path(&id.to_string(), "accept"), Some(TOKEN), json!({"reason": "G1 is failing"}))
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (reply["move"]["state"].as_str(), reply["move"]["decided_by"].as_str()),
        (Some("accepted"), Some("ops-bot"))
    );
    assert_eq!(reply["write"]["entity"], "pool:t");
    assert_eq!(reply["write"]["published"], true);
    let tiers = tiers_of(&b).await;
    assert_eq!(
        (names(&tiers["G"]), names(&tiers["N"])),
        (vec!["G2".to_owned()], vec!["N1".to_owned(), "G1".to_owned()])
    );
    let (actor, source, reason): (String, String, Option<String>) =
        sqlx::query_as("select actor, source, reason from audit where action = 'pool.tier' order by id desc limit 1")
            .fetch_one(&b.app.state.db)
            .await
            .unwrap();
    assert_eq!((actor.as_str(), source.as_str()), ("ops-bot", "api"));
    let reason = reason.unwrap();
    assert!(reason.starts_with("G1 is failing (accepting tier move") && reason.contains("60.0%"), "{reason}");
    let (status, reply) =
        b.app.send(Method::POST, &path(&id.to_string(), "accept"), Some(TOKEN), json!({"reason": "again"})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "{reply}");

    // With no cool-down, G1 failing further is offered N → U; dismissed, nothing changes.
    let mut policy = POLICY("suggest");
    policy["cooldown_ms"] = json!(0);
    assert_eq!(set_policy(&b, "t", policy).await.0, 200);
    for index in 6..9 {
        window(&b, index, &[("G1", 0.3)]).await;
        judge(&b, index).await;
    }
    let said = adaptive(&b).await;
    let second = said["moves"][0].clone();
    assert_eq!(
        (second["from"].as_str(), second["to"].as_str(), second["state"].as_str()),
        (Some("N"), Some("U"), Some("open"))
    );
    let id = second["id"].as_i64().unwrap().to_string();
    let (status, reply) =
        b.app.send(Method::POST, &path(&id, "dismiss"), Some(TOKEN), json!({"reason": "a known outage"})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (reply["move"]["state"].as_str(), reply["move"]["note"].as_str()),
        (Some("dismissed"), Some("a known outage"))
    );
    assert_eq!(reply["write"], Value::Null);
    assert_eq!(names(&tiers_of(&b).await["N"]), ["N1", "G1"]);
}

#[tokio::test]
async fn a_tier_policy_is_checked_and_only_a_tiers_pool_takes_one_that_is_on() {
    let b = bench().await;
    let (status, reply) = set_policy(&b, "t", json!({"mode": "automatic", "margin": 0.1})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tier_policy.normal_at_least")), "{reply}");
    let (status, reply) = set_policy(&b, "t", json!({"good_at_least": 0.99})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tier_policy.good_at_least")), "0.99 + 0.02: {reply}");
    let (status, reply) = set_policy(&b, "t", json!({"windows": 0})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tier_policy.windows")), "{reply}");
    let (status, reply) = set_policy(&b, "t", json!({"mode": "sometimes"})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("tier_policy")), "{reply}");
    let (status, reply) = set_policy(&b, "t", json!({"unknown": 1})).await;
    assert_eq!((status, reply["field"].as_str()), (400, Some("tier_policy")), "{reply}");
    let (status, reply) = set_policy(&b, "nope", json!({})).await;
    assert_eq!(status, 404, "{reply}");

    let (status, reply) = b
        .app
        .send(
            Method::PUT,
            "/api/v1/pools/c",
            Some(TOKEN),
            json!({
                "snapshot": {"kind": "channels", "ordering": "smooth", "batch_size": 100, "low_water": 10, "timezone": "UTC",
                             "eject_rebuild_percent": 90, "weights": [{"member": "G1", "weight": 1}]},
                "expected_version": 0,
            }),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = set_policy(&b, "c", json!({"mode": "suggest"})).await;
    assert_eq!((status, reply["field"].as_str()), (422, Some("tier_policy.mode")), "{reply}");
    assert_eq!(set_policy(&b, "c", json!({"mode": "off"})).await.0, 200);

    // Stored with the defaults filled in, and audited.
    let (status, reply) = set_policy(&b, "t", json!({"mode": "suggest", "windows": 4})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["policy"]["windows"], 4);
    assert_eq!(reply["policy"]["window_minutes"], 5);
    let said = adaptive(&b).await;
    assert_eq!(said["policy"]["mode"], "suggest");
    assert_eq!(said["channels"].as_array().unwrap().len(), 3);
    let (action, reason): (String, Option<String>) =
        sqlx::query_as("select action, reason from audit where entity = 'pool:t' order by id desc limit 1")
            .fetch_one(&b.app.state.db)
            .await
            .unwrap();
    assert_eq!((action.as_str(), reason.as_deref()), ("pool.tier_policy", Some("re-rate by success")));

    // Under an approval policy, a tier policy that finds moves is refused; off is not.
    let (status, reply) = b
        .app
        .send(
            Method::PUT,
            "/api/v1/policies/pool:t",
            Some(TOKEN),
            json!({"required_approvals": 1, "approver_roles": ["pm", "admin"], "expires_after_hours": 24,
                   "reason": "t is reviewed", "expected_version": 0}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let (status, reply) = set_policy(&b, "t", json!({"mode": "automatic"})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("policy")), "{reply}");
    assert_eq!(set_policy(&b, "t", json!({"mode": "off"})).await.0, 200);
}

#[tokio::test]
async fn a_suggestion_is_withdrawn_once_a_window_no_longer_points_its_way_and_decided_moves_are_pruned() {
    // Arrange: suggest mode; G1, G2 and N1 at 60 % for three windows: G1 and G2 are offered
    // G → N, N1 N → U
    let b = bench().await;
    assert_eq!(set_policy(&b, "t", POLICY("suggest")).await.0, 200);
    for index in 0..3 {
        window(&b, index, &[("G1", 0.6), ("G2", 0.6), ("N1", 0.6)]).await;
        judge(&b, index).await;
    }
    let offered = |said: &Value, channel: &str| {
        said["moves"].as_array().unwrap().iter().find(|m| m["channel"] == channel).cloned().unwrap()
    };
    let said = adaptive(&b).await;
    for channel in ["G1", "G2", "N1"] {
        assert_eq!(offered(&said, channel)["state"], "open", "{said}");
    }

    // Act: a window with too few outcomes decides nothing; then G1 at 97 % (back at its
    // tier), N1 at 99 % (the other way), G2 still at 60 %
    b.clock.set(minute(3 * 5 + 1));
    let g1 = client::health::ChannelCode::parse("G1").unwrap();
    let few = client::health::OutcomeCounts { ok: 10, fail: 0, latency_ms_sum: 0, latency_count: 0 };
    b.outcomes.record_counts(&g1, &few).await.unwrap();
    let quiet = judge(&b, 3).await;
    window(&b, 4, &[("G1", 0.97), ("G2", 0.6), ("N1", 0.99)]).await;
    let back = judge(&b, 4).await;

    // Assert: the offers stay through the quiet window; then G1's and N1's are withdrawn
    // and cannot be accepted, G2's stays
    assert!(quiet.withdrawn.is_empty(), "{quiet:?}");
    assert_eq!(back.withdrawn.len(), 2, "{back:?}");
    let said = adaptive(&b).await;
    let note = |channel: &str| {
        let m = offered(&said, channel);
        (m["state"].as_str().map(str::to_owned), m["note"].as_str().map(str::to_owned))
    };
    let superseded = |text: &str| (Some("superseded".to_owned()), Some(text.to_owned()));
    assert_eq!(note("G1"), superseded("withdrawn: a window of 5 min at 97.0% pointed it back at its tier G"));
    assert_eq!(note("N1"), superseded("withdrawn: a window of 5 min at 99.0% pointed it the other way, at tier G"));
    assert_eq!(note("G2").0.as_deref(), Some("open"));
    let accept = format!("/api/v1/pools/t/tier_moves/{}/accept", offered(&said, "G1")["id"]);
    let (status, reply) = b.app.send(Method::POST, &accept, Some(TOKEN), json!({"reason": "too late"})).await;
    assert_eq!((status, reply["field"].as_str()), (409, Some("state")), "{reply}");
    assert_eq!(names(&tiers_of(&b).await["G"]), ["G1", "G2"]);

    // Moves decided longer ago than the retention are pruned; open ones stay
    sqlx::query("update tier_move set decided_at = now() - interval '30 days', created_at = created_at - interval '30 days' where pool = 't'")
        .execute(&b.app.state.db)
        .await
        .unwrap();
    server::jobs::sample_prune::run_once(&b.app.state).await.unwrap();
    let left: Vec<(String, String)> = adaptive(&b).await["moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["channel"].as_str().unwrap().to_owned(), m["state"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(left, [("G2".to_owned(), "open".to_owned())]);
}

#[tokio::test]
async fn a_job_that_was_away_offers_and_withdraws_a_move_in_one_run_judging_the_windows_in_order() {
    // Arrange: suggest mode; G1 judged once at 60 %, then away while G1 has three more
    // windows at 60 % and one back at 97 %
    let b = bench().await;
    assert_eq!(set_policy(&b, "t", POLICY("suggest")).await.0, 200);
    window(&b, 0, &[("G1", 0.6)]).await;
    judge(&b, 0).await;
    for index in 1..4 {
        window(&b, index, &[("G1", 0.6)]).await;
    }
    window(&b, 4, &[("G1", 0.97)]).await;

    // Act: one run catches up windows 1 to 4
    let run = judge(&b, 4).await;

    // Assert: the third window at 60 % offered G → N, the window at 97 % withdrew it
    assert_eq!(run.offered.len(), 1, "{run:?}");
    assert!(run.offered[0].starts_with("t/G1: "), "{run:?}");
    assert_eq!(run.withdrawn, ["t/G1: withdrawn: a window of 5 min at 97.0% pointed it back at its tier G"], "{run:?}");
    let said = adaptive(&b).await;
    let moves = said["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 1, "{said}");
    assert_eq!((moves[0]["state"].as_str(), moves[0]["to"].as_str()), (Some("superseded"), Some("N")), "{said}");
    assert_eq!(names(&tiers_of(&b).await["G"]), ["G1", "G2"], "suggest mode changes nothing");
}

/// A person's edit of pool `t`: tiers G and N replaced.
async fn put_tiers(b: &Bench, g: Value, n: Value, reason: &str) {
    let (_, pool) = b.app.send(Method::GET, "/api/v1/pools/t", Some(TOKEN), Value::Null).await;
    let mut snapshot = pool["snapshot"].clone();
    snapshot["tiers"]["G"] = g;
    snapshot["tiers"]["N"] = n;
    let body = json!({"snapshot": snapshot, "expected_version": pool["version"], "reason": reason});
    let (status, reply) = b.app.send(Method::PUT, "/api/v1/pools/t", Some(TOKEN), body).await;
    assert_eq!(status, 200, "{reply}");
}

#[tokio::test]
async fn an_open_move_is_withdrawn_once_a_person_moved_the_channel_another_way() {
    // Arrange: X1, a channel of no registered tier, put in tier G by hand; suggest mode; X1
    // at 60 % for three windows: G → N offered
    let b = bench().await;
    let (status, reply) = b
        .app
        .send(Method::POST, "/api/v1/channels", Some(TOKEN), json!({"code": "X1", "name": "X1", "base_weight": 1}))
        .await;
    assert_eq!(status, 201, "{reply}");
    let one = |m: &str| json!({"member": m, "weight": 1});
    put_tiers(&b, json!([one("G1"), one("G2"), one("X1")]), json!([one("N1")]), "X1 in G").await;
    assert_eq!(set_policy(&b, "t", POLICY("suggest")).await.0, 200);
    for index in 0..3 {
        window(&b, index, &[("X1", 0.6)]).await;
        judge(&b, index).await;
    }
    assert_eq!(adaptive(&b).await["moves"][0]["state"], "open");

    // Act: a person moves X1 into N themselves (the pool's own edit), then a window passes
    put_tiers(&b, json!([one("G1"), one("G2")]), json!([one("N1"), one("X1")]), "X1 to N by hand").await;
    window(&b, 3, &[("X1", 0.6)]).await;
    let run = judge(&b, 3).await;

    // Assert: the offer is withdrawn saying why, not as a window pointing back
    let why = "withdrawn: the channel is in tier N now, not G (moved by another change)";
    assert_eq!(run.withdrawn, [format!("t/X1: {why}")], "{run:?}");
    let said = adaptive(&b).await;
    assert_eq!(
        (said["moves"][0]["state"].as_str(), said["moves"][0]["note"].as_str()),
        (Some("superseded"), Some(why))
    );
}
