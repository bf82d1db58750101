//! Traffic replay (`POST /api/v1/pools/{pool}/replay`, `tessera replay`): the draws a pool
//! really served in a period, from the draw log, run through a candidate configuration with
//! the engine ([`engine::replay`]), reported per member beside what actually happened: the
//! share, the tickets skipped at a cap, the success rate the recorded outcomes give each
//! channel, and the window deviation and longest run of both sequences.
//!
//! The demand is what was recorded, minute by minute (draws refused at the time are not in
//! the log, so they are not replayed); the replay starts from an empty list. The engine's
//! part runs on a blocking thread: a long period is seconds of CPU.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use api::replay::{MemberReplay, ReplayReport, SequenceSummary, MAX_WINDOW};
use chrono::{DateTime, SecondsFormat, Utc};
use client::pool::{PoolName, PoolSnapshot, MAX_BATCH};
use engine::metrics::Metrics;
use engine::replay::{Demand, ReplayConfig, TooMuchWork};
use engine::{BatchSize, Weights};
use rand::SeedableRng;
use sqlx::PgPool;

use super::MinuteRow;
use crate::error::ApiError;

/// What the recorded demand runs through.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// The pool as published now (health, ejections and disabled channels applied): what
    /// reproduces the recording when nothing changed since.
    Published,
    /// The pool as published now with these weights (a channels pool's channels, or a
    /// tiers pool's tiers): a weights change before it is saved.
    Weights(Weights),
    /// A whole pool body, as `PUT /api/v1/pools/{pool}` takes it.
    Body(Box<PoolSnapshot>),
}

impl Candidate {
    fn name(&self) -> &'static str {
        match self {
            Candidate::Published => "published",
            Candidate::Weights(_) => "weights",
            Candidate::Body(_) => "candidate",
        }
    }
}

/// What to replay.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    pub pool: PoolName,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub candidate: Candidate,
    /// Seeds the replay's orderings: the same seed replays the same.
    pub seed: u64,
    /// Tickets in a window of the window deviation, 1..=[`MAX_WINDOW`].
    pub window: usize,
    /// How much one replay may read and compute (`None`: any amount, the command line).
    pub bounds: Option<Bounds>,
}

/// How much one replay may read and compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Recorded draws in the period.
    pub draws: u64,
    /// The engine's steps ([`engine::replay::replay_within`]).
    pub steps: u64,
}

impl Bounds {
    /// A replay over HTTP.
    pub const HTTP: Bounds = Bounds { draws: api::replay::MAX_HTTP_DRAWS, steps: api::replay::MAX_HTTP_STEPS };
}

/// One replay over HTTP reads and computes at a time on this server (the others wait their
/// turn, at most [`TURN_WAIT`]): each is seconds of CPU at most, and a core stays free for
/// the data plane.
static COMPUTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// How long a replay over HTTP waits for its turn before it is answered 503.
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

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

fn unprocessable(field: &str, rule: impl Into<String>) -> ApiError {
    ApiError::Unprocessable { field: field.to_owned(), rule: rule.into() }
}

/// RFC 3339 in UTC, to the second, as the API writes times.
fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Replays the period. Refused naming the field: `to` not after `from`, or a period holding
/// more draws than the bounds allow, or taking more steps (`to`); `window` out of range;
/// `weights` or `candidate` that break a pool's rules; a period without recorded draws
/// (`from`). 404 for an unknown pool.
pub async fn replay(db: &PgPool, request: &ReplayRequest) -> Result<ReplayReport, ApiError> {
    if request.from >= request.to {
        return Err(unprocessable("to", "must be after from"));
    }
    if !(1..=MAX_WINDOW).contains(&request.window) {
        return Err(unprocessable("window", format!("must be 1..={MAX_WINDOW} tickets")));
    }
    let published = crate::pools::store::get_published_pool(db, &request.pool)
        .await?
        .ok_or_else(|| crate::pools::unknown_pool(&request.pool))?;
    let config_version = match &request.candidate {
        Candidate::Body(_) => None,
        _ => Some(published.version),
    };
    let snapshot = match &request.candidate {
        Candidate::Published => published.clone(),
        Candidate::Weights(weights) => {
            let mut s = published.clone();
            crate::pools::edit::set_weights(&mut s, weights.clone());
            s.validate().map_err(|e| unprocessable("weights", format!("{}: {}", e.field, e.rule)))?;
            s
        }
        Candidate::Body(body) => (**body).clone(),
    };
    let config = replay_config(&snapshot).map_err(|e| match request.candidate {
        Candidate::Published => ApiError::Unexpected(e.context("the published snapshot")),
        _ => unprocessable(request.candidate.name(), e.to_string()),
    })?;

    let max_draws = request.bounds.map_or(u64::MAX, |b| b.draws);
    let recorded = super::store::count(db, &request.pool, request.from, request.to).await?;
    if recorded > max_draws {
        return Err(unprocessable(
            "to",
            format!(
                "the period holds {recorded} recorded draws, more than the {max_draws} a replay over HTTP reads: \
                 replay a shorter period, or run `tessera replay`"
            ),
        ));
    }
    // One replay at a time reads and computes: its turn is taken before its rows are read,
    // and held by the thread that computes (a request given up on still finishes its work
    // before the next one starts).
    let turn = match request.bounds {
        Some(_) => Some(
            tokio::time::timeout(TURN_WAIT, COMPUTING.acquire())
                .await
                .map_err(|_| {
                    ApiError::Unavailable(format!(
                        "another replay has been computing on this server for {} s: try again shortly",
                        TURN_WAIT.as_secs()
                    ))
                })?
                .context("the replays' semaphore")?,
        ),
        None => None,
    };
    let rows = super::store::load(db, &request.pool, request.from, request.to).await?;
    let loaded: u64 = rows.iter().map(|r| r.sequence.len() as u64).sum();
    if loaded > max_draws {
        return Err(unprocessable(
            "to",
            format!(
                "the period grew to {loaded} recorded draws while it was read (a drain wrote more of it), \
                 more than the {max_draws} a replay over HTTP reads: replay a shorter period"
            ),
        ));
    }
    if rows.iter().all(|r| r.sequence.is_empty()) {
        let why = if !published.draw_log {
            " (its draw log is off: draw_log is false)".to_owned()
        } else {
            // Draws reach the log from Redis every 10 s: a period that ends now may not be there yet.
            match super::store::last_drained(db, &request.pool).await? {
                Some(at) => format!(
                    "; its draws were last copied from Redis at {} (the draw_log job copies them every 10 s)",
                    rfc3339(at)
                ),
                None => "; none of its draws has been copied from Redis yet (the draw_log job copies them every 10 s)"
                    .to_owned(),
            }
        };
        return Err(unprocessable(
            "from",
            format!(
                "the draw log holds no draws of pool {} from {} to {}{why}",
                request.pool,
                rfc3339(request.from),
                rfc3339(request.to)
            ),
        ));
    }

    let (seed, window) = (request.seed, request.window);
    let max_steps = request.bounds.map_or(u64::MAX, |b| b.steps);
    let measured = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        measure(&config, &rows, seed, window, max_steps)
    })
    .await
    .context("the replay's thread")?
    .map_err(|e| {
        unprocessable("to", format!("{e}: replay a shorter period, or run `tessera replay`, which has no such bound"))
    })?;
    let mut outcomes: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (channel, _, ok, fail) in super::store::outcomes(db, &measured.members, request.from, request.to).await? {
        let o = outcomes.entry(channel).or_default();
        o.0 += ok;
        o.1 += fail;
    }
    Ok(measured.report(request, config_version, &outcomes))
}

/// The sequences measured, before the outcomes are read.
struct Measured {
    /// Every member either sequence names: the candidate's first, in its order.
    members: Vec<String>,
    shares: Vec<f64>,
    recorded: Metrics,
    replayed: Metrics,
    cap_hits: Vec<u64>,
    minutes: u64,
    batches: u64,
    refused: u64,
}

/// Runs the recorded demand through `config` and measures both sequences (CPU only), in at
/// most `max_steps` of the engine's steps.
fn measure(
    config: &ReplayConfig,
    rows: &[MinuteRow],
    seed: u64,
    window: usize,
    max_steps: u64,
) -> Result<Measured, TooMuchWork> {
    let drawn: Vec<&MinuteRow> = rows.iter().filter(|r| !r.sequence.is_empty()).collect();
    let demand: Vec<Demand> =
        drawn.iter().map(|r| Demand { minute: r.minute, draws: r.sequence.len() as u64 }).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let replayed = engine::replay::replay_within(config, &demand, &mut rng, max_steps)?;

    let mut members = replayed.members.clone();
    let mut index: HashMap<String, usize> = members.iter().enumerate().map(|(i, m)| (m.clone(), i)).collect();
    for row in &drawn {
        for m in &row.members {
            if !index.contains_key(m) {
                index.insert(m.clone(), members.len());
                members.push(m.clone());
            }
        }
    }
    let mut shares = replayed.expected_shares.clone();
    shares.resize(members.len(), 0.0);
    let recorded: Vec<usize> = drawn
        .iter()
        .flat_map(|r| {
            // The row's own indices, as the report's.
            let at: Vec<usize> = r.members.iter().map(|m| index[m]).collect();
            r.sequence.iter().map(move |&i| at[i as usize])
        })
        .collect();
    let replayed_seq: Vec<usize> = replayed.sequence.iter().map(|&i| i as usize).collect();
    let mut cap_hits = replayed.cap_hits.clone();
    cap_hits.resize(members.len(), 0);
    Ok(Measured {
        recorded: Metrics::compute(&recorded, &shares, window),
        replayed: Metrics::compute(&replayed_seq, &shares, window),
        members,
        shares,
        cap_hits,
        minutes: drawn.len() as u64,
        batches: replayed.batches,
        refused: replayed.refused,
    })
}

impl Measured {
    /// The report, with each member's recorded outcomes (successes, failures).
    fn report(
        &self,
        request: &ReplayRequest,
        config_version: Option<u64>,
        outcomes: &BTreeMap<String, (i64, i64)>,
    ) -> ReplayReport {
        let rate = |m: &str| {
            outcomes.get(m).filter(|(ok, fail)| ok + fail > 0).map(|(ok, fail)| *ok as f64 / (ok + fail) as f64)
        };
        let share_of = |count: u64, total: usize| if total == 0 { 0.0 } else { count as f64 / total as f64 };
        let members: Vec<MemberReplay> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| MemberReplay {
                member: m.clone(),
                expected_share: self.shares[i],
                recorded_draws: self.recorded.counts[i],
                recorded_share: share_of(self.recorded.counts[i], self.recorded.draws),
                replayed_draws: self.replayed.counts[i],
                replayed_share: share_of(self.replayed.counts[i], self.replayed.draws),
                cap_hits: self.cap_hits[i],
                success_rate: rate(m),
                outcomes: outcomes.get(m).map_or(0, |(ok, fail)| (ok + fail) as u64),
            })
            .collect();
        let summary = |metrics: &Metrics, share: &dyn Fn(&MemberReplay) -> f64| {
            let (weighted, covered) = members
                .iter()
                .filter_map(|m| m.success_rate.map(|r| (r * share(m), share(m))))
                .fold((0.0, 0.0), |(a, b), (r, s)| (a + r, b + s));
            let longest = metrics.max_run.iter().enumerate().max_by_key(|(_, run)| **run);
            SequenceSummary {
                draws: metrics.draws as u64,
                expected_success_rate: (covered > 0.0).then(|| weighted / covered),
                max_window_deviation: metrics.max_window_dev,
                longest_run: longest.map_or(0, |(_, run)| *run as u64),
                longest_run_member: longest.filter(|(_, run)| **run > 0).map(|(i, _)| self.members[i].clone()),
            }
        };
        ReplayReport {
            pool: request.pool.to_string(),
            from: rfc3339(request.from),
            to: rfc3339(request.to),
            minutes: self.minutes,
            window: request.window as u64,
            through: request.candidate.name().to_owned(),
            config_version,
            recorded: summary(&self.recorded, &|m| m.recorded_share),
            replayed: summary(&self.replayed, &|m| m.replayed_share),
            members,
            batches: self.batches,
            refused: self.refused,
        }
    }
}

/// The report as a table.
pub fn render(r: &ReplayReport) -> String {
    let pct = |x: f64| format!("{:.2} %", x * 100.0);
    let rate = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), pct);
    let through = match (r.through.as_str(), r.config_version) {
        ("weights", Some(v)) => format!("its published configuration (v{v}) with the weights given"),
        (_, Some(v)) => format!("its published configuration now (v{v})"),
        _ => "the candidate configuration".to_owned(),
    };
    let mut out = format!(
        "replay of pool {} from {} to {}: {} minute{}, {} draw{} recorded, through {through}\n\n",
        r.pool,
        r.from,
        r.to,
        r.minutes,
        if r.minutes == 1 { "" } else { "s" },
        r.recorded.draws,
        if r.recorded.draws == 1 { "" } else { "s" },
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
