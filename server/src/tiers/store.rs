//! The adaptive-tier tables: pools' tier policies (`pool.tier_policy`), the channels'
//! streaks (`tier_streak`) and the moves found (`tier_move`).

use std::collections::HashMap;

use api::tiers::{ChannelRating, TierMove};
use chrono::{DateTime, Utc};
use engine::adaptive::{Direction, Streak};
use engine::Tier;
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row};

use crate::inputs::rfc3339;

/// Every tiers pool's name and raw tier policy, by name.
pub async fn policies(db: &PgPool) -> Result<Vec<(String, Value)>, sqlx::Error> {
    sqlx::query_as("select name, tier_policy from pool where kind = 'tiers' order by name").fetch_all(db).await
}

/// A pool's kind and raw tier policy; `None` for an unknown pool.
pub async fn policy_of_pool<'e>(
    db: impl sqlx::PgExecutor<'e>,
    pool: &str,
) -> Result<Option<(String, Value)>, sqlx::Error> {
    sqlx::query_as("select kind, tier_policy from pool where name = $1").bind(pool).fetch_optional(db).await
}

/// A tiers pool's channel with its tier and streak.
#[derive(Debug, Clone)]
pub struct Rated {
    pub channel: String,
    pub tier: Tier,
    pub streak: Streak,
    /// The last window judged, when it was judged with windows of `window_minutes`.
    pub judged_window: Option<i64>,
    pub window_minutes: Option<u32>,
}

impl Rated {
    /// The last window judged with windows of `minutes` (another length starts afresh).
    pub fn judged_with(&self, minutes: u32) -> Option<i64> {
        self.judged_window.filter(|_| self.window_minutes == Some(minutes))
    }
}

fn direction_of(raw: Option<String>) -> Option<Direction> {
    match raw.as_deref() {
        Some("up") => Some(Direction::Up),
        Some("down") => Some(Direction::Down),
        _ => None,
    }
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Up => "up",
        Direction::Down => "down",
    }
}

/// A pool's channels in tiers with their streaks, by code.
pub async fn rated<'e>(db: impl sqlx::PgExecutor<'e>, pool: &str) -> Result<Vec<Rated>, sqlx::Error> {
    let rows = sqlx::query(
        "select m.channel, m.tier, s.tier as streak_tier, s.direction, s.rates, s.last_move_at, s.window_minutes,
                s.judged_window
         from pool_member m left join tier_streak s on s.pool = m.pool and s.channel = m.channel
         where m.pool = $1 and m.tier is not null order by m.channel",
    )
    .bind(pool)
    .fetch_all(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let tier: String = r.try_get("tier")?;
        let Ok(tier) = tier.parse::<Tier>() else { continue };
        let last_move: Option<DateTime<Utc>> = r.try_get("last_move_at")?;
        let mut streak = Streak {
            direction: direction_of(r.try_get("direction")?),
            rates: r.try_get::<Option<Vec<f64>>, _>("rates")?.unwrap_or_default(),
            last_move_ms: last_move.map(|t| t.timestamp_millis()),
        };
        // Counted in another tier (a person moved the channel since): it starts again.
        if r.try_get::<Option<String>, _>("streak_tier")?.is_some_and(|t| t != tier.as_str()) {
            streak.direction = None;
            streak.rates.clear();
        }
        out.push(Rated {
            channel: r.try_get("channel")?,
            tier,
            streak,
            judged_window: r.try_get("judged_window")?,
            window_minutes: r.try_get::<Option<i32>, _>("window_minutes")?.and_then(|m| u32::try_from(m).ok()),
        });
    }
    Ok(out)
}

/// Stores a channel's streak, counted in `tier`, after its windows were judged.
pub async fn save_streak(
    tx: &mut PgConnection,
    pool: &str,
    (channel, tier): (&str, Tier),
    streak: &Streak,
    window_minutes: u32,
    judged_window: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into tier_streak (pool, channel, direction, rates, last_move_at, window_minutes, judged_window, tier, updated_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, now())
         on conflict (pool, channel) do update set tier = excluded.tier, direction = excluded.direction, rates = excluded.rates,
             last_move_at = excluded.last_move_at, window_minutes = excluded.window_minutes,
             judged_window = excluded.judged_window, updated_at = now()",
    )
    .bind(pool)
    .bind(channel)
    .bind(streak.direction.map(direction_name))
    .bind(&streak.rates)
    .bind(crate::health::at(streak.last_move_ms))
    .bind(window_minutes as i32)
    .bind(judged_window)
    .bind(tier.as_str())
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Records that `channel` moved into `tier` in `pool` at `now`: its streak starts again,
/// its cool-down from now, and the pool's open moves of it are superseded.
pub async fn moved(
    tx: &mut PgConnection,
    pool: &str,
    (channel, tier): (&str, Tier),
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into tier_streak (pool, channel, tier, last_move_at) values ($1, $2, $3, $4)
         on conflict (pool, channel) do update set tier = excluded.tier, direction = null, rates = '{}',
             last_move_at = excluded.last_move_at, updated_at = now()",
    )
    .bind(pool)
    .bind(channel)
    .bind(tier.as_str())
    .bind(now)
    .execute(&mut *tx)
    .await?;
    supersede(tx, pool, Some(channel), &format!("the channel moved to tier {tier}"), now).await?;
    Ok(())
}

/// Supersedes the open moves of `pool` (of `channel` only, when given), saying why;
/// answers how many.
pub async fn supersede(
    tx: &mut PgConnection,
    pool: &str,
    channel: Option<&str>,
    why: &str,
    now: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "update tier_move set state = 'superseded', note = $3, decided_at = $4
         where pool = $1 and ($2::text is null or channel = $2) and state = 'open'",
    )
    .bind(pool)
    .bind(channel)
    .bind(why)
    .bind(now)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(done)
}

/// Starts every streak of `pool` again (a new policy judges from the next window not
/// judged yet on); the cool-downs stay.
pub async fn reset_streaks(tx: &mut PgConnection, pool: &str) -> Result<(), sqlx::Error> {
    sqlx::query("update tier_streak set direction = null, rates = '{}', updated_at = now() where pool = $1")
        .bind(pool)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// A move as found, before it is stored.
pub struct NewMove<'a> {
    pub pool: &'a str,
    pub channel: &'a str,
    pub from: Tier,
    pub to: Tier,
    pub rates: &'a [f64],
    pub window_minutes: u32,
    /// `open` or `applied`.
    pub state: &'a str,
    pub note: Option<&'a str>,
    pub at: DateTime<Utc>,
    pub audit_id: Option<i64>,
}

/// Stores a move, superseding the channel's open one in the pool; answers its id.
pub async fn insert_move(tx: &mut PgConnection, m: &NewMove<'_>) -> Result<i64, sqlx::Error> {
    supersede(tx, m.pool, Some(m.channel), "a newer move of the channel superseded it", m.at).await?;
    let decided = (m.state == "applied").then_some("health");
    sqlx::query_scalar(
        "insert into tier_move (pool, channel, from_tier, to_tier, rates, window_minutes, state, note, created_at,
             decided_by, decided_at, audit_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, case when $10::text is null then null else $9 end, $11)
         returning id",
    )
    .bind(m.pool)
    .bind(m.channel)
    .bind(m.from.as_str())
    .bind(m.to.as_str())
    .bind(m.rates)
    .bind(m.window_minutes as i32)
    .bind(m.state)
    .bind(m.note)
    .bind(m.at)
    .bind(decided)
    .bind(m.audit_id)
    .fetch_one(&mut *tx)
    .await
}

const MOVE_COLUMNS: &str = "id, pool, channel, from_tier, to_tier, rates, window_minutes, state, note, created_at, \
                            decided_by, decided_at, audit_id";

fn move_row(r: &sqlx::postgres::PgRow) -> Result<TierMove, sqlx::Error> {
    let created: DateTime<Utc> = r.try_get("created_at")?;
    let decided: Option<DateTime<Utc>> = r.try_get("decided_at")?;
    Ok(TierMove {
        id: r.try_get("id")?,
        pool: r.try_get("pool")?,
        channel: r.try_get("channel")?,
        from: r.try_get("from_tier")?,
        to: r.try_get("to_tier")?,
        rates: r.try_get("rates")?,
        window_minutes: r.try_get::<i32, _>("window_minutes")?.max(1) as u32,
        state: r.try_get("state")?,
        note: r.try_get("note")?,
        created_at: rfc3339(created),
        decided_by: r.try_get("decided_by")?,
        decided_at: decided.map(rfc3339),
        audit_id: r.try_get("audit_id")?,
    })
}

/// One move of `pool`, locked for the caller's decision; `None` when the pool has no
/// move `id`.
pub async fn move_for_update(tx: &mut PgConnection, pool: &str, id: i64) -> Result<Option<TierMove>, sqlx::Error> {
    let row = sqlx::query(&format!("select {MOVE_COLUMNS} from tier_move where pool = $1 and id = $2 for update"))
        .bind(pool)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    row.as_ref().map(move_row).transpose()
}

/// Records a person's decision on an open move.
pub async fn decide(
    tx: &mut PgConnection,
    id: i64,
    state: &str,
    by: &str,
    note: Option<&str>,
    audit_id: Option<i64>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update tier_move set state = $2, decided_by = $3, decided_at = now(), note = $4,
             audit_id = coalesce($5, audit_id) where id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(by)
    .bind(note)
    .bind(audit_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The newest `limit` moves of `pool`, newest first.
pub async fn moves(db: &PgPool, pool: &str, limit: i64) -> Result<Vec<TierMove>, sqlx::Error> {
    let rows = sqlx::query(&format!("select {MOVE_COLUMNS} from tier_move where pool = $1 order by id desc limit $2"))
        .bind(pool)
        .bind(limit)
        .fetch_all(db)
        .await?;
    rows.iter().map(move_row).collect()
}

/// What a pool's channels' windows have said, as the policy's reply shows it.
pub fn ratings(rated: &[Rated], window_minutes: u32) -> Vec<ChannelRating> {
    rated
        .iter()
        .map(|r| ChannelRating {
            channel: r.channel.clone(),
            tier: r.tier.as_str().to_owned(),
            direction: r.streak.direction.map(|d| direction_name(d).to_owned()),
            rates: r.streak.rates.clone(),
            last_move_at: crate::health::at(r.streak.last_move_ms).map(rfc3339),
            judged_through: r
                .judged_with(window_minutes)
                .and_then(|w| crate::health::at(Some((w + 1) * i64::from(window_minutes) * 60_000)))
                .map(rfc3339),
        })
        .collect()
}

/// Stores a pool's tier policy.
pub async fn store_policy(tx: &mut PgConnection, pool: &str, policy: &Value) -> Result<(), sqlx::Error> {
    sqlx::query("update pool set tier_policy = $2 where name = $1").bind(pool).bind(policy).execute(&mut *tx).await?;
    Ok(())
}

/// A channel's tier in a pool: `None` when the pool does not hold it, `Some(None)` when it
/// is not in a tier there.
pub async fn member_tier(
    tx: &mut PgConnection,
    pool: &str,
    channel: &str,
) -> Result<Option<Option<String>>, sqlx::Error> {
    sqlx::query_scalar("select tier from pool_member where pool = $1 and channel = $2")
        .bind(pool)
        .bind(channel)
        .fetch_optional(&mut *tx)
        .await
}

/// The tiers pools other than `pool` that hold `channel`, by name.
pub async fn other_tiers_pools(tx: &mut PgConnection, channel: &str, pool: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select pool from pool_member where channel = $1 and tier is not null and pool <> $2 order by pool",
    )
    .bind(channel)
    .bind(pool)
    .fetch_all(&mut *tx)
    .await
}

/// Changes a channel's registered tier (its version bumped).
pub async fn set_channel_tier(tx: &mut PgConnection, channel: &str, tier: Tier) -> Result<(), sqlx::Error> {
    sqlx::query("update channel set tier = $2, version = version + 1, updated_at = now() where code = $1")
        .bind(channel)
        .bind(tier.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The tiers each open move of `pool` is from and to, by channel (at most one each).
pub async fn open_moves(tx: &mut PgConnection, pool: &str) -> Result<HashMap<String, (Tier, Tier)>, sqlx::Error> {
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("select channel, from_tier, to_tier from tier_move where pool = $1 and state = 'open'")
            .bind(pool)
            .fetch_all(&mut *tx)
            .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(channel, from, to)| Some((channel, (from.parse().ok()?, to.parse().ok()?))))
        .collect())
}

/// Deletes the moves decided (applied, accepted, dismissed or superseded) more than `days`
/// days ago, in batches; open moves stay. Returns how many. An applied or accepted move's
/// change stays in the audit trail.
pub async fn prune(db: &PgPool, days: i32) -> Result<u64, sqlx::Error> {
    crate::store::delete_in_batches(
        db,
        "delete from tier_move where id in (
             select id from tier_move
             where state <> 'open' and decided_at < now() - make_interval(days => $1) limit $2)",
        days,
    )
    .await
}
