//! Traffic replay (`tessera replay`): the draws a pool really served in a period, from the
//! draw log, run through a candidate configuration with the engine ([`engine::replay`]),
//! reported per member beside what actually happened: the share, the tickets skipped at a
//! cap, the success rate the recorded outcomes give each channel, and the window deviation
//! and longest run of both sequences.
//!
//! The demand is what was recorded, minute by minute (draws refused at the time are not in
//! the log, so they are not replayed); the replay starts from an empty list.

use std::collections::BTreeMap;

use anyhow::Context;
use chrono::{DateTime, Utc};
use client::pool::{PoolName, PoolSnapshot, MAX_BATCH};
use engine::metrics::Metrics;
use engine::replay::{Demand, ReplayConfig};
use engine::BatchSize;
use rand::SeedableRng;
use serde::Serialize;
use sqlx::PgPool;

/// What to replay.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    pub pool: PoolName,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The candidate configuration; `None`: the pool's configuration now.
    pub candidate: Option<PoolSnapshot>,
    /// Seeds the replay's shuffles (a `shuffle` pool): the same seed replays the same.
    pub seed: u64,
    /// Tickets in a window of the window deviation.
    pub window: usize,
}

/// One member in a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberReplay {
    pub member: String,
    /// Its share by the candidate's weights (no caps, no peaks).
    pub expected_share: f64,
    pub recorded_draws: u64,
    pub recorded_share: f64,
    pub replayed_draws: u64,
    pub replayed_share: f64,
    /// Tickets of it the replay skipped at a daily or short-window cap.
    pub cap_hits: u64,
    /// Its recorded outcomes in the period (successes over reports), if any were reported.
    pub success_rate: Option<f64>,
    pub outcomes: u64,
}

/// One sequence, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SequenceSummary {
    pub draws: u64,
    /// The success rate its shares would get from the recorded outcomes (over the members
    /// with outcomes).
    pub expected_success_rate: Option<f64>,
    /// The largest deviation of a member's count in any window of `window` tickets from the
    /// candidate's share of it.
    pub max_window_deviation: f64,
    pub longest_run: u64,
    pub longest_run_member: Option<String>,
}

/// A replay's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    pub pool: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Minutes with draws in the period.
    pub minutes: u64,
    pub window: usize,
    /// The candidate's version (the pool's configuration now) or `None` for a file.
    pub config_version: Option<u64>,
    pub members: Vec<MemberReplay>,
    pub recorded: SequenceSummary,
    pub replayed: SequenceSummary,
    /// Batches the replay built.
    pub batches: u64,
    /// Draws the replay could not serve (every ticket it looked at was capped).
    pub refused: u64,
}

/// The engine's view of a pool snapshot.
pub fn replay_config(snapshot: &PoolSnapshot) -> anyhow::Result<ReplayConfig> {
    Ok(ReplayConfig {
        weights: snapshot.weights.clone(),
        tiers: snapshot.tiers.clone(),
        batch_size: BatchSize::new(u64::from(snapshot.batch_size), MAX_BATCH).context("batch_size")?,
        low_water: snapshot.low_water,
        ordering: snapshot.ordering,
        schedule: snapshot.schedule().map_err(|e| anyhow::anyhow!("{e}"))?,
        daily_caps: snapshot.caps.clone(),
        window_caps: snapshot.window_caps.clone(),
        ejected: snapshot.ejected.clone(),
    })
}

/// Replays the period; refused when the pool has no configuration, or the period holds
/// no draws.
pub async fn replay(db: &PgPool, request: &ReplayRequest) -> anyhow::Result<ReplayReport> {
    anyhow::ensure!(request.from < request.to, "from must be before to");
    anyhow::ensure!(request.window > 0, "window must be at least 1");
    let (snapshot, config_version) = match &request.candidate {
        Some(candidate) => (candidate.clone(), None),
        None => {
            let now = crate::pools::store::get_published_pool(db, &request.pool)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .with_context(|| format!("pool {} has no configuration", request.pool))?;
            let version = now.version;
            (now, Some(version))
        }
    };
    let config = replay_config(&snapshot)?;
    let rows = super::store::load(db, &request.pool, request.from, request.to).await?;
    anyhow::ensure!(
        rows.iter().any(|r| !r.sequence.is_empty()),
        "the draw log holds no draws of pool {} from {} to {}",
        request.pool,
        request.from,
        request.to
    );
    let demand: Vec<Demand> = rows
        .iter()
        .filter(|r| !r.sequence.is_empty())
        .map(|r| Demand { minute: r.minute, draws: r.sequence.len() as u64 })
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(request.seed);
    let replayed = engine::replay::replay(&config, &demand, &mut rng);

    // Every member either sequence names: the candidate's first, in its order.
    let mut members = replayed.members.clone();
    for row in &rows {
        for m in &row.members {
            if !members.contains(m) {
                members.push(m.clone());
            }
        }
    }
    let index: BTreeMap<&str, usize> = members.iter().enumerate().map(|(i, m)| (m.as_str(), i)).collect();
    let mut shares = replayed.expected_shares.clone();
    shares.resize(members.len(), 0.0);
    let recorded: Vec<usize> = rows.iter().flat_map(|r| r.draws().map(|m| index[m]).collect::<Vec<_>>()).collect();
    let replayed_seq: Vec<usize> = replayed.sequence.iter().map(|&i| i as usize).collect();
    let recorded_metrics = Metrics::compute(&recorded, &shares, request.window);
    let replayed_metrics = Metrics::compute(&replayed_seq, &shares, request.window);

    let mut outcomes: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (channel, _, ok, fail) in super::store::outcomes(db, &members, request.from, request.to).await? {
        let o = outcomes.entry(channel).or_default();
        o.0 += ok;
        o.1 += fail;
    }
    let rate =
        |m: &str| outcomes.get(m).filter(|(ok, fail)| ok + fail > 0).map(|(ok, fail)| *ok as f64 / (ok + fail) as f64);
    let share_of = |count: u64, total: usize| if total == 0 { 0.0 } else { count as f64 / total as f64 };
    let member_rows: Vec<MemberReplay> = members
        .iter()
        .enumerate()
        .map(|(i, m)| MemberReplay {
            member: m.clone(),
            expected_share: shares[i],
            recorded_draws: recorded_metrics.counts[i],
            recorded_share: share_of(recorded_metrics.counts[i], recorded.len()),
            replayed_draws: replayed_metrics.counts[i],
            replayed_share: share_of(replayed_metrics.counts[i], replayed_seq.len()),
            cap_hits: replayed.cap_hits.get(i).copied().unwrap_or(0),
            success_rate: rate(m),
            outcomes: outcomes.get(m).map_or(0, |(ok, fail)| (ok + fail) as u64),
        })
        .collect();
    let summary = |metrics: &Metrics, share: &dyn Fn(&MemberReplay) -> f64| {
        let (weighted, covered) = member_rows
            .iter()
            .filter_map(|m| m.success_rate.map(|r| (r * share(m), share(m))))
            .fold((0.0, 0.0), |(a, b), (r, s)| (a + r, b + s));
        let longest = metrics.max_run.iter().enumerate().max_by_key(|(_, run)| **run);
        SequenceSummary {
            draws: metrics.draws as u64,
            expected_success_rate: (covered > 0.0).then(|| weighted / covered),
            max_window_deviation: metrics.max_window_dev,
            longest_run: longest.map_or(0, |(_, run)| *run as u64),
            longest_run_member: longest.filter(|(_, run)| **run > 0).map(|(i, _)| members[i].clone()),
        }
    };
    Ok(ReplayReport {
        pool: request.pool.to_string(),
        from: request.from,
        to: request.to,
        minutes: rows.iter().filter(|r| !r.sequence.is_empty()).count() as u64,
        window: request.window,
        config_version,
        recorded: summary(&recorded_metrics, &|m| m.recorded_share),
        replayed: summary(&replayed_metrics, &|m| m.replayed_share),
        members: member_rows,
        batches: replayed.batches,
        refused: replayed.refused,
    })
}

/// The report as a table.
pub fn render(r: &ReplayReport) -> String {
    let pct = |x: f64| format!("{:.2} %", x * 100.0);
    let rate = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), pct);
    let mut out = format!(
        "replay of pool {} from {} to {}: {} minutes, {} draws recorded, through {}\n\n",
        r.pool,
        r.from.to_rfc3339(),
        r.to.to_rfc3339(),
        r.minutes,
        r.recorded.draws,
        r.config_version
            .map_or_else(|| "the candidate configuration".to_owned(), |v| format!("its configuration now (v{v})"))
    );
    out.push_str(&format!(
        "{:<20} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9}\n",
        "member", "expected", "recorded", "share", "replayed", "share", "cap hits", "success"
    ));
    for m in &r.members {
        out.push_str(&format!(
            "{:<20} {:>9} {:>10} {:>9} {:>10} {:>9} {:>9} {:>9}\n",
            m.member,
            pct(m.expected_share),
            m.recorded_draws,
            pct(m.recorded_share),
            m.replayed_draws,
            pct(m.replayed_share),
            m.cap_hits,
            rate(m.success_rate)
        ));
    }
    for (name, s) in [("recorded", &r.recorded), ("replayed", &r.replayed)] {
        out.push_str(&format!(
            "\n{name}: {} draws, expected success {}, max deviation in a window of {} {:.2} tickets, longest run {}{}",
            s.draws,
            rate(s.expected_success_rate),
            r.window,
            s.max_window_deviation,
            s.longest_run,
            s.longest_run_member.as_ref().map_or_else(String::new, |m| format!(" ({m})"))
        ));
    }
    out.push_str(&format!("\nreplayed: {} batches built, {} draws refused at their caps\n", r.batches, r.refused));
    out
}
