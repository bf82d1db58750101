//! The control plane's side of a pool: publish its snapshot, keep its days, refill it,
//! eject and restore members. The server's jobs call these; they never run on the request
//! path. Every write is one script or one command on the pool's keys (one hash tag).

use std::collections::HashSet;

use chrono::{DateTime, Days as ChronoDays, NaiveDate, NaiveTime, TimeZone, Utc};
use engine::order::{build_batch, TailRun};
use engine::{Apportioner, BatchSize, Tier, Weights};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use redis::Value;
use serde::Serialize;

use super::types::{weighted, PoolName, PoolSnapshot, MAX_BATCH};
use super::PoolError;
use crate::clock::Clock;
use crate::connection::RedisHandle;
use crate::keys::Keys;
use crate::scripts;

/// Batches larger than this are staged in a list first, then committed in one script
/// (which renames the staged list into place).
pub const STAGE_ABOVE: usize = 2000;

/// Tickets moved per call of `shift_tail.lua` before an append, and the most an append's
/// commit then copies: each call stays well under a millisecond of Redis time.
const SHIFT_STEP: u64 = 500;

/// What a refill did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RefillOutcome {
    /// One batch was added (`mode`: append, standby or replace).
    Added { mode: &'static str, tickets: u64, seq: u64, length: u64 },
    /// The list is above low-water and a standby batch exists.
    NotNeeded,
    /// Another refiller added the batch first (nothing written by this one).
    Raced,
}

/// The pool-local days the draw script counts in, and when each ends (UTC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Days {
    pub today: NaiveDate,
    pub today_ends: DateTime<Utc>,
    pub tomorrow: NaiveDate,
    pub tomorrow_ends: DateTime<Utc>,
}

/// How a reweight reaches the tickets already in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReweightMode {
    /// The remaining tickets are drawn as they are; the next batch uses the new weights.
    Drain,
    /// The remaining tickets and the standby batch are replaced at once by a fresh batch.
    Immediate,
}

impl ReweightMode {
    /// The name the API gives it (as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::Immediate => "immediate",
        }
    }
}

/// What ejecting a member did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EjectOutcome {
    /// Share of the pool's weight ejected now, percent.
    pub ejected_percent: f64,
    /// The pool was rebuilt without the ejected members (they held more than the pool's
    /// `eject_rebuild_percent`); otherwise their tickets are skipped as drawn.
    pub rebuilt: bool,
}

/// What a refill reads in one round trip: the snapshot, `seq` and the apportioner, the
/// list's length, whether a standby batch exists, the last tickets of the list and of the
/// standby batch, and the ejected members.
type PoolReadout =
    (Option<String>, (Option<u64>, Option<String>), u64, bool, Vec<String>, Vec<String>, HashSet<String>);

/// Control-plane operations on pools.
#[derive(Clone)]
pub struct PoolAdmin {
    redis: RedisHandle,
    pub(super) keys: Keys,
    clock: Clock,
}

/// The first instant of `date` in `tz` (a midnight skipped by a DST change: the first
/// instant that exists that day).
fn start_of<Tz: TimeZone>(tz: &Tz, date: NaiveDate) -> DateTime<Utc> {
    for hour in 0..24 {
        let local = date.and_time(NaiveTime::from_hms_opt(hour, 0, 0).expect("valid hour"));
        if let Some(at) = tz.from_local_datetime(&local).earliest() {
            return at.with_timezone(&Utc);
        }
    }
    Utc.from_utc_datetime(&date.and_time(NaiveTime::MIN))
}

/// The pool-local day holding `now` and the next one.
pub fn days_at(snapshot: &PoolSnapshot, now: DateTime<Utc>) -> Result<Days, PoolError> {
    let tz = snapshot.schedule().map_err(PoolError::Invalid)?.timezone();
    let today = now.with_timezone(&tz).date_naive();
    let tomorrow = today + ChronoDays::new(1);
    let after = tomorrow + ChronoDays::new(1);
    Ok(Days { today, today_ends: start_of(&tz, tomorrow), tomorrow, tomorrow_ends: start_of(&tz, after) })
}

impl PoolAdmin {
    /// Operations over `redis` under `keys`, timed by `clock`.
    pub fn new(redis: RedisHandle, keys: Keys, clock: Clock) -> Self {
        Self { redis, keys, clock }
    }

    pub(super) async fn conn(&self) -> Result<crate::RedisConnection, PoolError> {
        self.redis.connection().await.map_err(PoolError::Redis)
    }

    /// Now by the one clock: Redis `TIME`, or the hand-set clock.
    pub async fn now(&self) -> Result<DateTime<Utc>, PoolError> {
        if let Clock::Manual(_) = self.clock {
            return Ok(self.clock.guess());
        }
        let (secs, micros): (i64, i64) =
            redis::cmd("TIME").query_async(&mut self.conn().await?).await.map_err(PoolError::Redis)?;
        Utc.timestamp_opt(secs, (micros * 1000) as u32)
            .single()
            .ok_or_else(|| PoolError::Protocol { script: "TIME", detail: format!("{secs}.{micros}") })
    }

    /// Installs a snapshot unless Redis holds one as new or newer, then makes the pool
    /// ready to draw: its days written and its list filled. Returns whether it was written.
    #[tracing::instrument(skip_all, fields(pool = %pool, version = snapshot.version), err)]
    pub async fn publish(&self, pool: &PoolName, snapshot: &PoolSnapshot) -> Result<bool, PoolError> {
        snapshot.validate().map_err(PoolError::Invalid)?;
        let mut conn = self.conn().await?;
        let p = pool.as_str();
        let mut call = scripts::pool().publish.key(self.keys.pool_meta(p));
        call.key(self.keys.pool_state(p))
            .key(self.keys.pool_ejected(p))
            .arg(snapshot.version)
            .arg(snapshot.low_water)
            .arg(if snapshot.caps.is_empty() && snapshot.window_caps.is_none() { "0" } else { "1" })
            .arg(snapshot.kind_name())
            .arg(snapshot.window_ms())
            .arg(if snapshot.draw_log { "1" } else { "0" })
            .arg(snapshot.ejected.len());
        for member in &snapshot.ejected {
            call.arg(member);
        }
        // Tiers with no channel left lose their tickets with the same step.
        let dead = snapshot.dead_tiers();
        call.arg(dead.len());
        for tier in &dead {
            call.key(self.keys.pool_tier_tickets(p, tier.as_str()))
                .key(self.keys.pool_tier_standby(p, tier.as_str()))
                .arg(format!("seq:{tier}"));
        }
        for (field, value) in snapshot.meta_fields() {
            call.arg(field).arg(value);
        }
        let (written, _current): (i64, u64) = call.invoke_async(&mut conn).await.map_err(PoolError::Redis)?;
        self.rotate(pool).await?;
        // Ready to draw: each tier's list of channels gets a batch, then the list of tier
        // tickets (in this order, so no draw finds a tier ticket without its channels).
        for tier in self.tier_lanes(pool).await? {
            match self.add_batch(pool, Some(tier), None).await {
                Ok(_) | Err(PoolError::NothingDrawable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.add_batch(pool, None, None).await?;
        Ok(written == 1)
    }

    /// Publishes a snapshot with new weights and applies it by `mode`. Returns whether the
    /// snapshot was newer than the one Redis holds (nothing changes otherwise).
    pub async fn reweight(
        &self,
        pool: &PoolName,
        snapshot: &PoolSnapshot,
        mode: ReweightMode,
    ) -> Result<bool, PoolError> {
        let written = self.publish(pool, snapshot).await?;
        if written && mode == ReweightMode::Immediate {
            self.rebuild(pool).await?;
        }
        Ok(written)
    }

    /// The snapshot Redis holds, if any.
    pub async fn snapshot(&self, pool: &PoolName) -> Result<Option<PoolSnapshot>, PoolError> {
        read_snapshot(&mut self.conn().await?, &self.keys, pool).await
    }

    /// Writes the pool's current and next local day (and when each ends) for the draw
    /// script; run at least daily (the rotation job runs it every minute). The next day is
    /// written a day ahead, so the first draw after midnight already counts in it.
    pub async fn rotate(&self, pool: &PoolName) -> Result<Days, PoolError> {
        let snapshot = self.snapshot(pool).await?.ok_or_else(|| PoolError::UnknownPool(pool.clone()))?;
        let days = days_at(&snapshot, self.now().await?)?;
        redis::cmd("HSET")
            .arg(self.keys.pool_state(pool.as_str()))
            .arg("day0")
            .arg(days.today.to_string())
            .arg("day0_end")
            .arg(days.today_ends.timestamp_millis())
            .arg("day1")
            .arg(days.tomorrow.to_string())
            .arg("day1_end")
            .arg(days.tomorrow_ends.timestamp_millis())
            .query_async::<()>(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)?;
        Ok(days)
    }

    /// Adds one batch where one is due: appended when the list is below low-water, else
    /// built ahead as the standby batch when there is none. When the list is below
    /// low-water and a standby batch exists, the standby batch is the one appended and the
    /// new batch, built to follow it, becomes the standby: batches reach the list in the
    /// order they were built, each seam guarded against its real predecessor. Safe under
    /// any number of concurrent callers: each batch is added exactly once.
    #[tracing::instrument(skip_all, fields(pool = %pool), err)]
    pub async fn refill(&self, pool: &PoolName) -> Result<RefillOutcome, PoolError> {
        match self.add_batch(pool, None, None).await? {
            RefillOutcome::NotNeeded => {}
            other => return Ok(other),
        }
        // A tiers pool: then each tier's list (a tier whose channels are all ejected gets
        // none: its list went with its last channel, and draws map its tickets to another
        // tier).
        for tier in self.tier_lanes(pool).await? {
            match self.add_batch(pool, Some(tier), None).await {
                Ok(RefillOutcome::NotNeeded) | Err(PoolError::NothingDrawable(_)) => {}
                other => return other,
            }
        }
        Ok(RefillOutcome::NotNeeded)
    }

    async fn tier_lanes(&self, pool: &PoolName) -> Result<Vec<Tier>, PoolError> {
        Ok(self.snapshot(pool).await?.map(|s| s.tiers.keys().copied().collect()).unwrap_or_default())
    }

    /// Replaces every remaining ticket (and the standby batch) with a fresh batch: an
    /// `immediate` reweight, or a rebuild after a large ejection.
    #[tracing::instrument(skip_all, fields(pool = %pool), err)]
    pub async fn rebuild(&self, pool: &PoolName) -> Result<RefillOutcome, PoolError> {
        // The tiers' channels first, then the tier tickets (a new tier's tickets never
        // arrive before its channels).
        for tier in self.tier_lanes(pool).await? {
            match self.replace(pool, Some(tier)).await {
                Ok(_) | Err(PoolError::NothingDrawable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.replace(pool, None).await
    }

    /// A replacement must happen: when a refill commits between reading the sequence and
    /// the script, read again and retry (a few times, then fail loudly).
    async fn replace(&self, pool: &PoolName, lane: Option<Tier>) -> Result<RefillOutcome, PoolError> {
        for _ in 0..5 {
            match self.add_batch(pool, lane, Some("replace")).await? {
                RefillOutcome::Raced => continue,
                done => return Ok(done),
            }
        }
        Err(PoolError::Protocol {
            script: "refill_pool",
            detail: format!("rebuild of {pool} kept racing with refills"),
        })
    }

    async fn add_batch(
        &self,
        pool: &PoolName,
        lane: Option<Tier>,
        forced: Option<&'static str>,
    ) -> Result<RefillOutcome, PoolError> {
        let k = &self.keys;
        let p = pool.as_str();
        let (tickets_key, standby_key, seq_field, apportioner_field) = match lane {
            None => (k.pool_tickets(p), k.pool_standby(p), "seq".to_owned(), "apportioner".to_owned()),
            Some(t) => (
                k.pool_tier_tickets(p, t.as_str()),
                k.pool_tier_standby(p, t.as_str()),
                format!("seq:{t}"),
                format!("apportioner:{t}"),
            ),
        };
        let mut conn = self.conn().await?;
        let (snapshot_json, state, length, standby, list_tail, standby_tail, ejected): PoolReadout = redis::pipe()
            .cmd("HGET")
            .arg(k.pool_meta(p))
            .arg("snapshot")
            .cmd("HMGET")
            .arg(k.pool_state(p))
            .arg(&seq_field)
            .arg(&apportioner_field)
            .cmd("LLEN")
            .arg(&tickets_key)
            .cmd("EXISTS")
            .arg(&standby_key)
            .cmd("LRANGE")
            .arg(&tickets_key)
            .arg(-64)
            .arg(-1)
            .cmd("LRANGE")
            .arg(&standby_key)
            .arg(-64)
            .arg(-1)
            .cmd("SMEMBERS")
            .arg(k.pool_ejected(p))
            .query_async(&mut conn)
            .await
            .map_err(PoolError::Redis)?;
        let snapshot: PoolSnapshot = match snapshot_json {
            Some(json) => serde_json::from_str(&json)
                .map_err(|e| PoolError::Protocol { script: "pool meta", detail: e.to_string() })?,
            None => return Err(PoolError::UnknownPool(pool.clone())),
        };
        let mode = match forced {
            Some(mode) => mode,
            None if length < u64::from(snapshot.low_water) => "append",
            None if !standby => "standby",
            None => return Ok(RefillOutcome::NotNeeded),
        };
        let now = self.now().await?;
        let schedule = snapshot.schedule().map_err(PoolError::Invalid)?;
        let base = match lane {
            None => schedule.weights_at(now, &snapshot.weights),
            Some(t) => {
                snapshot.tiers.get(&t).ok_or_else(|| PoolError::NothingDrawable(format!("tier {t} has no channels")))?
            }
        };
        let weights = effective_weights(base, &ejected)?;
        // A peak batch over the largest (a pool stored before writes were checked for it,
        // PoolSnapshot::check_peak_batches) is cut to the largest rather than failing.
        let batch = BatchSize::new(u64::from(snapshot.batch_size), MAX_BATCH)
            .and_then(|b| {
                b.scaled(schedule.multiplier_at(now), MAX_BATCH)
                    .or_else(|_| BatchSize::new(u64::from(MAX_BATCH), MAX_BATCH))
            })
            .map_err(|e| PoolError::Invalid(crate::quota::InvalidInput::new("batch_size", e.to_string())))?;
        let (seq, stored) = state;
        let mut apportioner = match stored.and_then(|json| serde_json::from_str::<Apportioner>(&json).ok()) {
            Some(mut a) => {
                if a.weights() != &weights {
                    a.reweight(weights.clone());
                }
                a
            }
            None => Apportioner::new(weights.clone()),
        };
        let counts = apportioner.next_counts(batch);
        // The batch follows the standby batch when there is one: an append moves the
        // standby batch (built ahead to follow the list) onto the list first.
        let tail = if mode == "append" && standby { standby_tail } else { list_tail };
        let tail_indices: Vec<usize> = tail.iter().filter_map(|m| weights.index_of(m)).collect();
        let tail_run = if tail_indices.len() == tail.len() { TailRun::of(&tail_indices) } else { None };
        let mut rng = ChaCha8Rng::seed_from_u64(crate::fresh_seed());
        let order = build_batch(snapshot.ordering, &counts, if mode == "replace" { None } else { tail_run }, &mut rng);
        let tickets: Vec<&str> = order.iter().map(|&i| weights.name(i)).collect();
        let apportioner_json = serde_json::to_string(&apportioner).expect("an apportioner serialises");

        let staging = format!("{tickets_key}:staging:{:016x}", crate::fresh_seed());
        let staged = tickets.len() > STAGE_ABOVE;
        if staged {
            let mut pipe = redis::pipe();
            for chunk in tickets.chunks(1000) {
                pipe.cmd("RPUSH").arg(&staging).arg(chunk).ignore();
            }
            pipe.cmd("PEXPIRE").arg(&staging).arg(60_000).ignore();
            pipe.query_async::<()>(&mut conn).await.map_err(PoolError::Redis)?;
        }
        if mode == "append" && standby {
            // The append moves the standby batch onto the list: first, in bounded steps,
            // the list's tail goes onto the standby batch's head (the order draws see is
            // kept), so that the commit copies at most SHIFT_STEP tickets.
            // Until the list is down to SHIFT_STEP, or the standby batch went (a draw
            // promoted it) or another refiller added a batch: then the commit decides.
            loop {
                let moved: i64 = scripts::pool()
                    .shift_tail
                    .key(&tickets_key)
                    .key(&standby_key)
                    .key(k.pool_state(p))
                    .arg(SHIFT_STEP)
                    .arg(SHIFT_STEP)
                    .arg(&seq_field)
                    .arg(seq.unwrap_or(0))
                    .invoke_async(&mut conn)
                    .await
                    .map_err(PoolError::Redis)?;
                if moved < SHIFT_STEP as i64 {
                    break;
                }
            }
        }
        let mut call = scripts::pool().refill.key(k.pool_meta(p));
        call.key(k.pool_state(p))
            .key(&tickets_key)
            .key(&standby_key)
            .key(k.pool_refill_flag(p))
            .key(&staging)
            .arg(snapshot.version)
            .arg(seq.unwrap_or(0))
            .arg(mode)
            .arg(apportioner_json)
            .arg(&seq_field)
            .arg(&apportioner_field);
        if !staged {
            call.arg(&tickets);
        }
        let reply: Vec<Value> = call.invoke_async(&mut conn).await.map_err(PoolError::Redis)?;
        let f = super::reply::Fields::new("refill_pool", &reply);
        match f.str(0)? {
            "ok" => {
                Ok(RefillOutcome::Added { mode, tickets: tickets.len() as u64, seq: f.uint(1)?, length: f.uint(2)? })
            }
            "stale" | "stale_version" => Ok(RefillOutcome::Raced),
            "not_needed" => Ok(RefillOutcome::NotNeeded),
            "unknown_pool" => Err(PoolError::UnknownPool(pool.clone())),
            other => Err(f.unexpected(other).into()),
        }
    }

    /// Ejects a member: its tickets are skipped from now on; when the ejected members hold
    /// more than the pool's `eject_rebuild_percent` of the weight, the pool is rebuilt
    /// without them instead (so draws do not skip most tickets).
    pub async fn eject(&self, pool: &PoolName, member: &str) -> Result<EjectOutcome, PoolError> {
        let snapshot = self.snapshot(pool).await?.ok_or_else(|| PoolError::UnknownPool(pool.clone()))?;
        let channels = snapshot.channels();
        if channels.index_of(member).is_none() {
            return Err(PoolError::Invalid(crate::quota::InvalidInput::new(
                "member",
                format!("{member:?} is not a member of {pool}"),
            )));
        }
        let ejected = self.set_ejected(pool, "eject", member, snapshot.tier_of(member)).await?;
        let total = channels.total() as f64;
        let out: u64 = ejected.iter().filter_map(|m| channels.index_of(m)).map(|i| channels.weight(i)).sum();
        let ejected_percent = 100.0 * out as f64 / total;
        let rebuilt = ejected_percent > f64::from(snapshot.eject_rebuild_percent);
        if rebuilt {
            self.rebuild(pool).await?;
        }
        Ok(EjectOutcome { ejected_percent, rebuilt })
    }

    /// Lets an ejected member be drawn again (from its remaining tickets and every new
    /// batch). In a `tiers` pool, its tier's list gets a batch at once when it is below
    /// low-water (as it is when the member was the tier's last channel).
    pub async fn restore(&self, pool: &PoolName, member: &str) -> Result<(), PoolError> {
        self.set_ejected(pool, "restore", member, None).await?;
        let snapshot = self.snapshot(pool).await?;
        if let Some((tier, _)) = snapshot.as_ref().and_then(|s| s.tier_of(member)) {
            match self.add_batch(pool, Some(tier), None).await {
                Ok(_) | Err(PoolError::NothingDrawable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Ejects or restores `member`. `lane`, for an ejection in a `tiers` pool: the member's
    /// tier and its channels, whose list goes in the same step when none of them is left.
    async fn set_ejected(
        &self,
        pool: &PoolName,
        op: &str,
        member: &str,
        lane: Option<(Tier, &Weights)>,
    ) -> Result<HashSet<String>, PoolError> {
        let p = pool.as_str();
        let mut call = scripts::pool().set_ejected.key(self.keys.pool_ejected(p));
        call.key(self.keys.pool_state(p)).arg(op).arg(member);
        if let Some((tier, channels)) = lane {
            call.key(self.keys.pool_tier_tickets(p, tier.as_str()))
                .key(self.keys.pool_tier_standby(p, tier.as_str()))
                .arg(format!("seq:{tier}"))
                .arg(weighted(channels).collect::<Vec<_>>());
        }
        call.invoke_async(&mut self.conn().await?).await.map_err(PoolError::Redis)
    }

    /// Tickets left in the pool's list (not counting the standby batch).
    pub async fn length(&self, pool: &PoolName) -> Result<u64, PoolError> {
        redis::cmd("LLEN")
            .arg(self.keys.pool_tickets(pool.as_str()))
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)
    }

    /// Whether a draw flagged the pool for a refill since the last one.
    pub async fn refill_flagged(&self, pool: &PoolName) -> Result<bool, PoolError> {
        redis::cmd("EXISTS")
            .arg(self.keys.pool_refill_flag(pool.as_str()))
            .query_async(&mut self.conn().await?)
            .await
            .map_err(PoolError::Redis)
    }
}

/// The snapshot in a pool's meta hash.
pub(super) async fn read_snapshot(
    conn: &mut crate::RedisConnection,
    keys: &Keys,
    pool: &PoolName,
) -> Result<Option<PoolSnapshot>, PoolError> {
    let json: Option<String> = redis::cmd("HGET")
        .arg(keys.pool_meta(pool.as_str()))
        .arg("snapshot")
        .query_async(conn)
        .await
        .map_err(PoolError::Redis)?;
    json.map(|j| {
        serde_json::from_str(&j).map_err(|e| PoolError::Protocol { script: "pool meta", detail: e.to_string() })
    })
    .transpose()
}

/// The weights a new batch uses: ejected members at zero. Refused when nothing is left.
pub(super) fn effective_weights(weights: &Weights, ejected: &HashSet<String>) -> Result<Weights, PoolError> {
    if ejected.is_empty() {
        return Ok(weights.clone());
    }
    Weights::from_integers(weights.iter().map(|(m, w)| (m.to_owned(), if ejected.contains(m) { 0 } else { w })))
        .map_err(|e| PoolError::NothingDrawable(e.to_string()))
}
