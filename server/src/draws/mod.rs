//! The draw log in Postgres: what each pool handed out, minute by minute, drained from the
//! pools' Redis streams (the draw scripts append to them, see `lua/pool_lib.lua`) by the
//! `draw_log` job, with the channels' outcome counters per minute beside it. What traffic
//! replay reads, and where the live longest-run gauge comes from.
//!
//! A drain reads a pool's stream after its cursor, turns the entries into one row per
//! minute (by the script's clock), and writes the rows and the new cursor in one
//! transaction; only then is the stream trimmed. A drain that fails before the commit
//! leaves the cursor where it was and the next reads the same entries again; one that
//! fails after it reads on from the cursor: each draw is in Postgres once.
//!
//! Tickets of a lease given back unserved (`r` entries) are taken back from the draws of
//! the same drain, last first; those whose draws an earlier drain wrote are counted in the
//! row's `returned`.

pub mod replay;
pub mod routes;
pub mod store;

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use client::health::ChannelCode;
use client::pool::draw_log::{id_before, DrawLogEntry, LoggedDraws};
use client::pool::PoolName;
use engine::runs::RecentRuns;
use serde::Serialize;

use crate::metrics::retain_series;
use crate::state::AppState;

/// Entries read from a stream at a time (an entry of a lease holds up to a few thousand
/// draws).
pub const BATCH: usize = 500;

/// The most batches one run drains from one pool (the next run goes on).
const MAX_BATCHES: usize = 200;

/// How far back the longest-run gauge looks.
pub const RUN_WINDOW: TimeDelta = TimeDelta::seconds(60);

/// How many of the last minutes of outcome counters each run copies, this one included
/// (Redis keeps about an hour; reports may still arrive for a minute after it ends).
pub const OUTCOME_MINUTES: i64 = 10;

/// One minute of one pool's draws, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteRow {
    pub minute: DateTime<Utc>,
    /// The members the row's draws name, in the order they first appear.
    pub members: Vec<String>,
    /// The draws in order, as indices into `members`.
    pub sequence: Vec<u32>,
    /// Returned tickets whose draws were in an earlier row.
    pub returned: u32,
}

impl MinuteRow {
    /// Bytes per index: 1 while the members fit in a byte, else 2.
    pub fn width(&self) -> u8 {
        if self.members.len() <= 256 {
            1
        } else {
            2
        }
    }

    /// The sequence as stored: `width` bytes per draw, little-endian.
    pub fn encoded(&self) -> Vec<u8> {
        match self.width() {
            1 => self.sequence.iter().map(|&i| i as u8).collect(),
            _ => self.sequence.iter().flat_map(|&i| (i as u16).to_le_bytes()).collect(),
        }
    }

    /// The members of the row's draws, in order.
    pub fn draws(&self) -> impl Iterator<Item = &str> + '_ {
        self.sequence.iter().map(|&i| self.members[i as usize].as_str())
    }
}

/// Decodes a stored sequence (`width` bytes per draw); refused when it does not fit the
/// members it indexes.
pub fn decode(members: usize, width: u8, seq: &[u8]) -> anyhow::Result<Vec<u32>> {
    let indices: Vec<u32> = match width {
        1 => seq.iter().map(|&b| u32::from(b)).collect(),
        2 => {
            anyhow::ensure!(seq.len().is_multiple_of(2), "a sequence of width 2 with an odd length {}", seq.len());
            seq.chunks_exact(2).map(|p| u32::from(u16::from_le_bytes([p[0], p[1]]))).collect()
        }
        other => anyhow::bail!("a sequence of width {other}"),
    };
    anyhow::ensure!(indices.iter().all(|&i| (i as usize) < members), "an index past the row's {members} members");
    Ok(indices)
}

/// A row under construction: draws that a return took back are `None` until the end.
#[derive(Default)]
struct Building {
    members: Vec<String>,
    index: HashMap<String, u32>,
    sequence: Vec<Option<u32>>,
    returned: u32,
}

impl Building {
    fn push(&mut self, member: &str) {
        let next = self.members.len() as u32;
        let i = *self.index.entry(member.to_owned()).or_insert_with(|| {
            self.members.push(member.to_owned());
            next
        });
        self.sequence.push(Some(i));
    }

    /// Takes back the last draw of `member`; whether there was one.
    fn take_back(&mut self, member: &str) -> bool {
        let Some(&i) = self.index.get(member) else { return false };
        match self.sequence.iter_mut().rev().find(|d| **d == Some(i)) {
            Some(draw) => {
                *draw = None;
                true
            }
            None => false,
        }
    }
}

fn minute_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(60_000) * 60_000
}

/// The rows of a run of consecutive entries of one stream, by minute.
pub fn rows_of(entries: &[DrawLogEntry]) -> anyhow::Result<Vec<MinuteRow>> {
    let mut building: BTreeMap<i64, Building> = BTreeMap::new();
    for entry in entries {
        let minute = minute_of(entry.at_ms);
        match &entry.draws {
            LoggedDraws::Drawn(members) => {
                let row = building.entry(minute).or_default();
                for member in members {
                    row.push(member);
                }
            }
            LoggedDraws::Returned(members) => {
                for member in members.iter().rev() {
                    let taken = building.values_mut().rev().any(|row| row.take_back(member));
                    if !taken {
                        building.entry(minute).or_default().returned += 1;
                    }
                }
            }
            LoggedDraws::Unreadable(_) => {}
        }
    }
    building
        .into_iter()
        .map(|(minute, row)| {
            let at = DateTime::from_timestamp_millis(minute).with_context(|| format!("a minute at {minute} ms"))?;
            Ok(MinuteRow {
                minute: at,
                members: row.members,
                sequence: row.sequence.into_iter().flatten().collect(),
                returned: row.returned,
            })
        })
        .collect()
}

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Drained {
    /// Pools whose streams were read.
    pub pools: u64,
    /// Stream entries written to Postgres (and trimmed).
    pub entries: u64,
    /// Draws written.
    pub draws: u64,
    /// Rows written.
    pub rows: u64,
    /// Pools whose drain failed (logged; the others are still drained).
    pub failed: u64,
    /// Channel minutes of outcome counters copied.
    pub outcome_minutes: u64,
    /// Entries skipped because they could not be read (logged).
    pub unreadable: u64,
}

/// Drains every pool's draw log into Postgres as of `now` (the longest-run gauge looks at
/// the minute before it), then copies the channels' recent outcome minutes.
#[tracing::instrument(name = "job.draw_log", skip_all, err)]
pub async fn drain(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<Drained> {
    let mut drained = Drained::default();
    let pools = crate::samples::store::list_pools(&state.db).await.context("listing pools")?;
    let known = |labels: &HashMap<&str, &str>| pools.iter().any(|p| Some(&p.as_str()) == labels.get("pool"));
    retain_series(&state.metrics.watch.pool_longest_run, known);
    retain_series(&state.metrics.watch.pool_drained_at, known);
    state.recent_runs.lock().expect("recent runs lock").retain(|name, _| pools.iter().any(|p| p.as_str() == name));
    for pool in &pools {
        drained.pools += 1;
        match drain_pool(state, pool, now).await {
            Ok(one) => {
                drained.entries += one.entries;
                drained.draws += one.draws;
                drained.rows += one.rows;
                drained.unreadable += one.unreadable;
            }
            Err(e) => {
                tracing::error!(pool = %pool, error = format!("{e:#}"), "draining the draw log failed");
                drained.failed += 1;
            }
        }
    }
    drained.outcome_minutes = copy_outcomes(state, now).await.context("copying outcome minutes")?;
    Ok(drained)
}

async fn drain_pool(state: &AppState, pool: &PoolName, now: DateTime<Utc>) -> anyhow::Result<Drained> {
    let mut drained = Drained::default();
    let mut cursor = store::cursor(&state.db, pool).await?;
    for batch in 0..MAX_BATCHES {
        let mut entries = state.pool_admin.read_draw_log(pool, cursor.as_deref(), BATCH).await?;
        if entries.is_empty() && batch == 0 {
            // A stream whose last id is before the cursor was made anew (a Redis that
            // restarted with an earlier clock, another host): read it from its start.
            let last = state.pool_admin.draw_log_last_id(pool).await?;
            if let (Some(last), Some(at)) = (&last, &cursor) {
                if id_before(last, at) {
                    tracing::warn!(pool = %pool, cursor = %at, last = %last, "the draw log was made anew; draining it from its start");
                    entries = state.pool_admin.read_draw_log(pool, None, BATCH).await?;
                }
            }
        }
        let Some(last) = entries.last() else { break };
        let last_id = last.id.clone();
        for entry in &entries {
            if let LoggedDraws::Unreadable(why) = &entry.draws {
                tracing::warn!(pool = %pool, entry = %entry.id, why = %why, "skipping an unreadable draw-log entry");
                drained.unreadable += 1;
            }
        }
        let rows = rows_of(&entries)?;
        if !store::write(&state.db, pool, &rows, cursor.as_deref(), &last_id).await? {
            tracing::info!(pool = %pool, "another drain moved the draw log's cursor; leaving the pool to it");
            break;
        }
        // Trimmed after the commit: a failure here leaves entries the cursor already passed.
        if let Err(e) = state.pool_admin.trim_draw_log(pool, &last_id).await {
            tracing::warn!(pool = %pool, error = %e, "trimming the drained draw log failed");
        }
        {
            let mut runs = state.recent_runs.lock().expect("recent runs lock");
            let runs =
                runs.entry(pool.as_str().to_owned()).or_insert_with(|| RecentRuns::new(RUN_WINDOW.num_milliseconds()));
            for entry in &entries {
                if let LoggedDraws::Drawn(members) = &entry.draws {
                    for member in members {
                        runs.push(member, entry.at_ms);
                    }
                }
            }
        }
        drained.entries += entries.len() as u64;
        drained.draws += rows.iter().map(|r| r.sequence.len() as u64).sum::<u64>();
        drained.rows += rows.len() as u64;
        cursor = Some(last_id);
        if entries.len() < BATCH {
            break;
        }
    }
    let longest = {
        let mut runs = state.recent_runs.lock().expect("recent runs lock");
        runs.get_mut(pool.as_str()).and_then(|r| r.longest(now.timestamp_millis())).map_or(0, |r| r.length)
    };
    let watch = &state.metrics.watch;
    watch.pool_longest_run.with_label_values(&[pool.as_str()]).set(i64::try_from(longest).unwrap_or(i64::MAX));
    watch.pool_drained_at.with_label_values(&[pool.as_str()]).set(now.timestamp());
    Ok(drained)
}

/// Copies the last [`OUTCOME_MINUTES`] minutes of every registered channel's outcome
/// counters from Redis into `outcome_minute` (a minute copied again takes the newer
/// counts); returns how many channel minutes.
async fn copy_outcomes(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<u64> {
    let to = now.timestamp().div_euclid(60);
    let mut copied = 0;
    for code in store::channel_codes(&state.db).await? {
        let Ok(channel) = ChannelCode::parse(&code) else { continue };
        let minutes = state.outcomes.window(&channel, to - OUTCOME_MINUTES + 1, to).await?;
        copied += store::upsert_outcomes(&state.db, &code, &minutes).await?;
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drawn(id: u32, at_ms: i64, members: &str) -> DrawLogEntry {
        DrawLogEntry {
            id: format!("{id}-0"),
            at_ms,
            draws: LoggedDraws::Drawn(members.split(',').map(str::to_owned).collect()),
        }
    }

    fn returned(id: u32, at_ms: i64, members: &str) -> DrawLogEntry {
        DrawLogEntry {
            id: format!("{id}-0"),
            at_ms,
            draws: LoggedDraws::Returned(members.split(',').map(str::to_owned).collect()),
        }
    }

    #[test]
    fn entries_become_one_row_per_minute_in_order() {
        let rows = rows_of(&[drawn(1, 59_000, "A,B"), drawn(2, 60_000, "B"), drawn(3, 119_999, "C,A")]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].minute.timestamp(), 0);
        assert_eq!(rows[0].draws().collect::<Vec<_>>(), ["A", "B"]);
        assert_eq!(rows[1].minute.timestamp(), 60);
        assert_eq!(rows[1].draws().collect::<Vec<_>>(), ["B", "C", "A"]);
        assert_eq!(rows[1].members, ["B", "C", "A"]);
        assert_eq!(decode(3, rows[1].width(), &rows[1].encoded()).unwrap(), rows[1].sequence);
    }

    #[test]
    fn returned_tickets_take_back_the_latest_draws_and_count_the_rest() {
        let rows = rows_of(&[drawn(1, 1_000, "A,B,A,C"), drawn(2, 61_000, "B"), returned(3, 62_000, "A,C,D")]).unwrap();
        assert_eq!(rows[0].draws().collect::<Vec<_>>(), ["A", "B"], "the lease's A and C came back");
        assert_eq!(rows[1].draws().collect::<Vec<_>>(), ["B"]);
        assert_eq!((rows[0].returned, rows[1].returned), (0, 1), "D was drawn before this drain");
    }

    #[test]
    fn many_members_take_two_bytes_a_draw() {
        let names: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        let rows = rows_of(&[drawn(1, 0, &names.join(","))]).unwrap();
        assert_eq!(rows[0].width(), 2);
        assert_eq!(rows[0].encoded().len(), 600);
        assert_eq!(decode(300, 2, &rows[0].encoded()).unwrap(), rows[0].sequence);
        assert!(decode(2, 1, &[0, 1, 2]).is_err(), "an index past the members");
    }
}
