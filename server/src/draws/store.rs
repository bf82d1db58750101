//! The `draw_log`, `draw_log_cursor` and `outcome_minute` tables.

use chrono::{DateTime, Utc};
use client::health::MinuteCounts;
use client::pool::PoolName;
use sqlx::{PgPool, Row};

use super::MinuteRow;

/// The id of the last entry of the pool's stream written here (none: nothing yet).
pub async fn cursor(db: &PgPool, pool: &PoolName) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("select last_id from draw_log_cursor where pool = $1")
        .bind(pool.as_str())
        .fetch_optional(db)
        .await
}

/// When the drain last wrote draws of the pool to the log (none: never).
pub async fn last_drained(db: &PgPool, pool: &PoolName) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("select updated_at from draw_log_cursor where pool = $1")
        .bind(pool.as_str())
        .fetch_optional(db)
        .await
}

/// Writes a drain's rows and moves the pool's cursor from `after` (where this drain began
/// reading) to `last_id`, in one transaction; returns false, writing nothing, when the
/// cursor is no longer at `after` (another instance drained those entries meanwhile: two
/// drains at once, while the job ran unled).
pub async fn write(
    db: &PgPool,
    pool: &PoolName,
    rows: &[MinuteRow],
    after: Option<&str>,
    last_id: &str,
) -> anyhow::Result<bool> {
    let mut tx = db.begin().await?;
    // One drain of a pool at a time: the cursor is read again under the lock.
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('draw_log:' || $1, 0))")
        .bind(pool.as_str())
        .execute(&mut *tx)
        .await?;
    let now: Option<String> = sqlx::query_scalar("select last_id from draw_log_cursor where pool = $1")
        .bind(pool.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if now.as_deref() != after {
        return Ok(false);
    }
    for row in rows {
        anyhow::ensure!(row.members.len() <= 1 << 16, "a minute of pool {pool} names more than 65,536 members");
        sqlx::query(
            "insert into draw_log (pool, minute, members, width, seq, draws, returned)
             values ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(pool.as_str())
        .bind(row.minute)
        .bind(&row.members)
        .bind(i16::from(row.width()))
        .bind(row.encoded())
        .bind(i32::try_from(row.sequence.len()).unwrap_or(i32::MAX))
        .bind(i32::try_from(row.returned).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "insert into draw_log_cursor (pool, last_id) values ($1, $2)
         on conflict (pool) do update set last_id = excluded.last_id, updated_at = now()",
    )
    .bind(pool.as_str())
    .bind(last_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// A `draw_log` row's members and its draws decoded (indices into them).
fn draws_of(row: &sqlx::postgres::PgRow) -> anyhow::Result<(Vec<String>, Vec<u32>)> {
    let members: Vec<String> = row.try_get("members")?;
    let width = u8::try_from(row.try_get::<i16, _>("width")?)?;
    let seq: Vec<u8> = row.try_get("seq")?;
    let sequence = super::decode(members.len(), width, &seq)?;
    Ok((members, sequence))
}

/// How many draws the pool's rows with minutes in `from..to` hold (what a replay of the
/// period would read), without reading them.
pub async fn count(db: &PgPool, pool: &PoolName, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<u64, sqlx::Error> {
    let n: i64 = sqlx::query_scalar(
        "select coalesce(sum(draws), 0)::bigint from draw_log where pool = $1 and minute >= $2 and minute < $3",
    )
    .bind(pool.as_str())
    .bind(from)
    .bind(to)
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The pool's draws with minutes in `from..to`, minute by minute, in the order served.
pub async fn load(
    db: &PgPool,
    pool: &PoolName,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<Vec<MinuteRow>> {
    let rows = sqlx::query(
        "select minute, members, width, seq, returned from draw_log
         where pool = $1 and minute >= $2 and minute < $3 order by minute, id",
    )
    .bind(pool.as_str())
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await?;
    let mut out: Vec<MinuteRow> = Vec::new();
    for row in rows {
        let minute: DateTime<Utc> = row.try_get("minute")?;
        let returned = u32::try_from(row.try_get::<i32, _>("returned")?)?;
        let (members, sequence) = draws_of(&row)?;
        // Several drains of one minute: one row, its members re-indexed.
        match out.last_mut().filter(|last| last.minute == minute) {
            Some(last) => {
                let mut at: std::collections::HashMap<&str, u32> =
                    last.members.iter().enumerate().map(|(i, m)| (m.as_str(), i as u32)).collect();
                let mut added = Vec::new();
                // This row's indices, as the merged row's.
                let map: Vec<u32> = members
                    .iter()
                    .map(|m| {
                        *at.entry(m.as_str()).or_insert_with(|| {
                            added.push(m.clone());
                            (last.members.len() + added.len() - 1) as u32
                        })
                    })
                    .collect();
                last.members.extend(added);
                last.sequence.extend(sequence.into_iter().map(|i| map[i as usize]));
                last.returned += returned;
            }
            None => out.push(MinuteRow { minute, members, sequence, returned }),
        }
    }
    Ok(out)
}

/// Each member's draws in the pool's rows with minutes from `from` on (a short cap
/// window's draws that reached Postgres), less nothing for returns (a count at least as
/// high as what was served).
pub async fn counts_since(db: &PgPool, pool: &PoolName, from: DateTime<Utc>) -> anyhow::Result<Vec<(String, u64)>> {
    let rows = sqlx::query("select members, width, seq from draw_log where pool = $1 and minute >= $2")
        .bind(pool.as_str())
        .bind(from)
        .fetch_all(db)
        .await?;
    let mut counts: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for row in rows {
        let (members, sequence) = draws_of(&row)?;
        let mut per_member = vec![0u64; members.len()];
        for i in sequence {
            per_member[i as usize] += 1;
        }
        for (member, n) in members.into_iter().zip(per_member).filter(|(_, n)| *n > 0) {
            *counts.entry(member).or_default() += n;
        }
    }
    Ok(counts.into_iter().collect())
}

/// The registered channels' codes.
pub async fn channel_codes(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select code from channel order by code").fetch_all(db).await
}

/// Writes a channel's minutes of outcome counters (a minute already there takes these
/// counts); returns how many.
pub async fn upsert_outcomes(db: &PgPool, channel: &str, minutes: &[MinuteCounts]) -> anyhow::Result<u64> {
    let mut written = 0;
    for m in minutes {
        let minute =
            DateTime::from_timestamp(m.minute * 60, 0).ok_or_else(|| anyhow::anyhow!("minute {}", m.minute))?;
        written += sqlx::query(
            "insert into outcome_minute (channel, minute, ok, fail, latency_ms_sum, latency_count)
             values ($1, $2, $3, $4, $5, $6)
             on conflict (channel, minute) do update set ok = excluded.ok, fail = excluded.fail,
                 latency_ms_sum = excluded.latency_ms_sum, latency_count = excluded.latency_count",
        )
        .bind(channel)
        .bind(minute)
        .bind(i64::try_from(m.ok)?)
        .bind(i64::try_from(m.fail)?)
        .bind(i64::try_from(m.latency_ms_sum)?)
        .bind(i64::try_from(m.latency_count)?)
        .execute(db)
        .await?
        .rows_affected();
    }
    Ok(written)
}

/// The channels' outcome counts per minute in `from..to`: (channel, minute, ok, fail).
pub async fn outcomes(
    db: &PgPool,
    channels: &[String],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(String, DateTime<Utc>, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "select channel, minute, ok, fail from outcome_minute
         where channel = any($1) and minute >= $2 and minute < $3 order by channel, minute",
    )
    .bind(channels)
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await
}

/// Deletes draw-log rows written, and outcome minutes, more than `days` days ago, in
/// batches; returns how many.
pub async fn prune(db: &PgPool, days: i32) -> Result<u64, sqlx::Error> {
    let rows = crate::store::delete_in_batches(
        db,
        "delete from draw_log where id in (
             select id from draw_log where created_at < now() - make_interval(days => $1) limit $2)",
        days,
    )
    .await?;
    let minutes = crate::store::delete_in_batches(
        db,
        "delete from outcome_minute where (channel, minute) in (
             select channel, minute from outcome_minute where minute < now() - make_interval(days => $1) limit $2)",
        days,
    )
    .await?;
    Ok(rows + minutes)
}
