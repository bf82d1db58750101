//! The pool samples (`pool_sample`, `pool_sample_member`): written by the `pool_sampler`
//! job, read by the samples endpoint and the dashboard, pruned by `sample_prune`.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use client::pool::PoolName;
use serde::Serialize;
use sqlx::PgPool;

use crate::configuration::SampleRetention;
use crate::samples::sampler::{ListLength, MemberSample, PoolSample, MAX_WINDOW, WINDOW, WINDOW_SLACK};

/// The pools with at least one snapshot in Postgres (entities `pool:<name>`).
#[tracing::instrument(skip_all, err)]
pub async fn list_pools(db: &PgPool) -> Result<Vec<PoolName>, sqlx::Error> {
    let names: Vec<String> =
        sqlx::query_scalar("select distinct substr(entity, 6) from snapshot where entity like 'pool:%' order by 1")
            .fetch_all(db)
            .await?;
    Ok(names
        .into_iter()
        .filter_map(|name| match PoolName::parse(&name) {
            Ok(pool) => Some(pool),
            Err(e) => {
                tracing::warn!(entity = %crate::change::Entity::pool_key(name), error = %e, "snapshot entity is not a valid pool name");
                None
            }
        })
        .collect())
}

/// Whether `pool` has a snapshot in Postgres (the endpoint's 404).
#[tracing::instrument(skip_all, fields(pool = %pool), err)]
pub async fn pool_exists(db: &PgPool, pool: &PoolName) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from snapshot where entity = $1)")
        .bind(crate::change::Entity::pool_key(pool))
        .fetch_one(db)
        .await
}

/// The earlier end of a window: the newest sample taken at least about [`WINDOW`] before
/// `now`, and not more than [`MAX_WINDOW`] before it.
pub(crate) struct Earlier {
    pub taken_at: DateTime<Utc>,
    pub day: NaiveDate,
    pub hits: HashMap<String, u64>,
}

#[tracing::instrument(skip_all, fields(pool = %pool), err)]
pub(crate) async fn get_earlier_sample(
    db: &PgPool,
    pool: &PoolName,
    now: DateTime<Utc>,
) -> Result<Option<Earlier>, sqlx::Error> {
    let row: Option<(i64, DateTime<Utc>, NaiveDate)> = sqlx::query_as(
        "select id, taken_at, day from pool_sample
         where pool = $1 and taken_at <= $2 and taken_at >= $3
         order by taken_at desc, id desc limit 1",
    )
    .bind(pool.as_str())
    .bind(now - (WINDOW - WINDOW_SLACK))
    .bind(now - MAX_WINDOW)
    .fetch_optional(db)
    .await?;
    let Some((id, taken_at, day)) = row else { return Ok(None) };
    let members: Vec<(String, i64)> =
        sqlx::query_as("select member, hits from pool_sample_member where sample_id = $1")
            .bind(id)
            .fetch_all(db)
            .await?;
    let hits = members.into_iter().map(|(m, h)| (m, h.max(0) as u64)).collect();
    Ok(Some(Earlier { taken_at, day, hits }))
}

pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Stores one sample and its members in one transaction.
#[tracing::instrument(skip_all, fields(pool = %pool), err)]
pub async fn insert_sample(db: &PgPool, pool: &PoolName, sample: &PoolSample) -> Result<i64, sqlx::Error> {
    let mut tx = db.begin().await?;
    let tiers = sample.tiers.as_ref().map(|t| serde_json::to_value(t).expect("list lengths serialise"));
    let id: i64 = sqlx::query_scalar(
        "insert into pool_sample (pool, taken_at, version, day, tickets, standby, tiers, window_seconds, draws, batches)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) returning id",
    )
    .bind(pool.as_str())
    .bind(sample.taken_at)
    .bind(to_i64(sample.version))
    .bind(sample.day)
    .bind(to_i64(sample.tickets))
    .bind(to_i64(sample.standby))
    .bind(tiers)
    .bind(sample.window_seconds)
    .bind(sample.draws.map(to_i64))
    .bind(sample.batches.map(to_i64))
    .fetch_one(&mut *tx)
    .await?;
    let mut names = Vec::new();
    let mut hits = Vec::new();
    let mut window_hits = Vec::new();
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (name, m) in &sample.members {
        names.push(name.clone());
        hits.push(to_i64(m.hits));
        window_hits.push(m.window_hits.map(to_i64));
        expected.push(m.expected_share);
        actual.push(m.actual_share);
    }
    sqlx::query(
        "insert into pool_sample_member (sample_id, member, hits, window_hits, expected_share, actual_share)
         select $1, * from unnest($2::text[], $3::bigint[], $4::bigint[], $5::float8[], $6::float8[])",
    )
    .bind(id)
    .bind(names)
    .bind(hits)
    .bind(window_hits)
    .bind(expected)
    .bind(actual)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// A page of one pool's samples, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplePage {
    pub samples: Vec<PoolSample>,
    /// More samples were taken since `since` than the page holds: the oldest were left out.
    pub truncated: bool,
}

#[derive(sqlx::FromRow)]
pub(crate) struct SampleRow {
    id: i64,
    taken_at: DateTime<Utc>,
    version: i64,
    day: NaiveDate,
    tickets: i64,
    standby: i64,
    tiers: Option<sqlx::types::Json<BTreeMap<String, ListLength>>>,
    window_seconds: Option<f64>,
    draws: Option<i64>,
    batches: Option<i64>,
}

#[derive(sqlx::FromRow)]
pub(crate) struct MemberRow {
    sample_id: i64,
    member: String,
    hits: i64,
    window_hits: Option<i64>,
    expected_share: f64,
    actual_share: Option<f64>,
}

/// The newest `limit` samples of `pool` taken at or after `since`, oldest first.
#[tracing::instrument(skip_all, fields(pool = %pool, limit), err)]
pub async fn list_samples(
    db: &PgPool,
    pool: &PoolName,
    since: DateTime<Utc>,
    limit: u32,
) -> Result<SamplePage, sqlx::Error> {
    let mut rows: Vec<SampleRow> = sqlx::query_as(
        "select id, taken_at, version, day, tickets, standby, tiers, window_seconds, draws, batches
         from pool_sample where pool = $1 and taken_at >= $2
         order by taken_at desc, id desc limit $3",
    )
    .bind(pool.as_str())
    .bind(since)
    .bind(i64::from(limit) + 1)
    .fetch_all(db)
    .await?;
    let truncated = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    rows.reverse();
    let mut members = list_sample_members(db, &rows).await?;
    let samples = rows.into_iter().map(|r| to_sample(r, &mut members)).collect();
    Ok(SamplePage { samples, truncated })
}

/// Every pool's newest `limit` samples taken at or after `since`, oldest first, by pool
/// name: what the dashboard charts, in two queries whatever the number of pools.
#[tracing::instrument(skip_all, fields(limit), err)]
pub async fn list_samples_of_every_pool(
    db: &PgPool,
    since: DateTime<Utc>,
    limit: u32,
) -> Result<BTreeMap<String, SamplePage>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Ranked {
        pool: String,
        position: i64,
        #[sqlx(flatten)]
        row: SampleRow,
    }
    let ranked: Vec<Ranked> = sqlx::query_as(
        "select pool, position, id, taken_at, version, day, tickets, standby, tiers, window_seconds, draws, batches
         from (select *, row_number() over (partition by pool order by taken_at desc, id desc) as position
               from pool_sample where taken_at >= $1) newest
         where position <= $2
         order by pool, taken_at, id",
    )
    .bind(since)
    .bind(i64::from(limit) + 1)
    .fetch_all(db)
    .await?;
    let mut by_pool: BTreeMap<String, (Vec<SampleRow>, bool)> = BTreeMap::new();
    for r in ranked {
        let (rows, truncated) = by_pool.entry(r.pool).or_default();
        // The one row past the limit only says that the page is truncated.
        if r.position > i64::from(limit) {
            *truncated = true;
        } else {
            rows.push(r.row);
        }
    }
    let all: Vec<&SampleRow> = by_pool.values().flat_map(|(rows, _)| rows).collect();
    let mut members = list_sample_members(db, all).await?;
    Ok(by_pool
        .into_iter()
        .map(|(pool, (rows, truncated))| {
            let samples = rows.into_iter().map(|r| to_sample(r, &mut members)).collect();
            (pool, SamplePage { samples, truncated })
        })
        .collect())
}

/// The members of the samples `rows`, by sample id.
pub(crate) async fn list_sample_members<'r>(
    db: &PgPool,
    rows: impl IntoIterator<Item = &'r SampleRow>,
) -> Result<HashMap<i64, BTreeMap<String, MemberSample>>, sqlx::Error> {
    let ids: Vec<i64> = rows.into_iter().map(|r| r.id).collect();
    let member_rows: Vec<MemberRow> = sqlx::query_as(
        "select sample_id, member, hits, window_hits, expected_share, actual_share
         from pool_sample_member where sample_id = any($1)",
    )
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let mut members: HashMap<i64, BTreeMap<String, MemberSample>> = HashMap::new();
    for m in member_rows {
        members.entry(m.sample_id).or_default().insert(
            m.member,
            MemberSample {
                hits: m.hits.max(0) as u64,
                window_hits: m.window_hits.map(|h| h.max(0) as u64),
                expected_share: m.expected_share,
                actual_share: m.actual_share,
            },
        );
    }
    Ok(members)
}

pub(crate) fn to_sample(r: SampleRow, members: &mut HashMap<i64, BTreeMap<String, MemberSample>>) -> PoolSample {
    let (tickets, standby) = (r.tickets.max(0) as u64, r.standby.max(0) as u64);
    PoolSample {
        taken_at: r.taken_at,
        version: r.version.max(0) as u64,
        day: r.day,
        tickets,
        standby,
        length: tickets + standby,
        batches: r.batches.map(|b| b.max(0) as u64),
        tiers: r.tiers.map(|t| t.0),
        window_seconds: r.window_seconds,
        draws: r.draws.map(|d| d.max(0) as u64),
        members: members.remove(&r.id).unwrap_or_default(),
    }
}

/// Deletes the samples (and their members) taken more than `retention` before Postgres's
/// `now()`, a batch at a time; returns how many samples.
#[tracing::instrument(skip_all, fields(retention_days = retention.days()), err)]
pub async fn prune_samples(db: &PgPool, retention: SampleRetention) -> Result<u64, sqlx::Error> {
    let days = i32::try_from(retention.days()).unwrap_or(i32::MAX);
    crate::store::delete_in_batches(
        db,
        "delete from pool_sample where id in (
             select id from pool_sample where taken_at < now() - make_interval(days => $1) limit $2)",
        days,
    )
    .await
}

/// The members' day counters in a pool's last sample of the last two days: its pool-local
/// day and each member's draws that day (what a Redis that lost the pool is given back).
pub async fn last_day_hits(
    db: &PgPool,
    pool: &PoolName,
) -> Result<Option<(NaiveDate, Vec<(String, i64)>)>, sqlx::Error> {
    let last: Option<(i64, NaiveDate)> = sqlx::query_as(
        "select id, day from pool_sample where pool = $1 and taken_at > now() - interval '2 days'
         order by taken_at desc limit 1",
    )
    .bind(pool.as_str())
    .fetch_optional(db)
    .await?;
    let Some((id, day)) = last else { return Ok(None) };
    let hits: Vec<(String, i64)> =
        sqlx::query_as("select member, hits from pool_sample_member where sample_id = $1 order by member")
            .bind(id)
            .fetch_all(db)
            .await?;
    Ok(Some((day, hits)))
}
