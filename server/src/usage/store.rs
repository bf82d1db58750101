//! The usage ledger's SQL: writing records (idempotently), rebuilding a tenant's counters,
//! and the usage reports.
//!
//! Writers and the restore of one tenant exclude each other through an advisory lock on
//! the tenant (writers share it, a restore holds it alone): every row a restore does not
//! see gets a larger id than every row it sees, so `restored_upto` splits the rows the
//! restored counters hold from those still to be charged.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use client::quota::{Earlier, RequestId, Restore, TenantId, UsageOutcome, UsageRecord};
use serde_json::{Map, Value};
use sqlx::{PgPool, Row};

use api::tenants::{UsageGroup as Group, UsageRow};

/// Who wrote a ledger row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Drained from the usage stream.
    Stream,
    /// Written by the instance that settled it (the stream had lost it).
    Instance,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Instance => "instance",
        }
    }
}

fn lock_key(tenant: &TenantId) -> String {
    format!("usage:{tenant}")
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Writes records in one transaction; a record the ledger holds already (same tenant,
/// request id, outcome and reservation time) is left alone, and so are two settles of one
/// request id of which one is a late settle of nothing reserved, finished within two days
/// of each other (a retry after a Redis that lost the first one's done marker: whichever
/// copy arrives second is the same use). A request id used again after its done marker
/// expired is a new reservation: written as a row of its own, `reuse_of` naming the
/// earlier row. Two such copies written at the same instant by two transactions can both
/// pass; the compensation then shows the difference.
/// A settle row is written marked `charge_pending` (cleared by [`charge_decided`] once its
/// charge to the counters was decided). Returns, for each record newly written, its index
/// in `records` and its row id, and how many of them reused a request id.
pub async fn insert(
    db: &PgPool,
    records: &[UsageRecord],
    source: Source,
) -> Result<(Vec<(usize, i64)>, usize), sqlx::Error> {
    if records.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let mut tx = db.begin().await?;
    let mut tenants: Vec<&TenantId> = records.iter().map(|r| &r.tenant).collect();
    tenants.sort();
    tenants.dedup();
    for t in tenants {
        sqlx::query("select pg_advisory_xact_lock_shared(hashtext($1))").bind(lock_key(t)).execute(&mut *tx).await?;
    }
    let mut written = Vec::new();
    let mut reused = 0;
    for (i, r) in records.iter().enumerate() {
        let charged: Map<String, Value> = r.charged.iter().map(|p| (p.bucket.clone(), Value::from(p.tokens))).collect();
        let plans: Map<String, Value> = r.plan_periods.iter().map(|(p, n)| (p.clone(), Value::from(*n))).collect();
        let row: Option<(i64, Option<i64>)> = sqlx::query_as(
            "insert into usage_ledger
               (tenant, request_id, outcome, late, reserved, actual, charged, plan_periods, reserved_at, at, source, model,
                generation, charge_pending, reuse_of, reserved_parts, deadline)
             select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $3 = 'settled',
                    (select max(id) from usage_ledger
                      where tenant = $1 and request_id = $2 and outcome = $3 and reserved_at <> $9),
                    $14, $15
             where not ($3 = 'settled' and exists
                          (select 1 from usage_ledger
                            where tenant = $1 and request_id = $2 and outcome = 'settled'
                              and ((late and reserved = 0) or ($4 and $5 = 0))
                              and at between $10 - interval '2 days' and $10 + interval '2 days'))
             on conflict (tenant, request_id, outcome, reserved_at) do nothing
             returning id, reuse_of",
        )
        .bind(r.tenant.as_str())
        .bind(&r.request_id)
        .bind(r.outcome.name())
        .bind(r.late)
        .bind(r.reserved as i64)
        .bind(r.actual.map(|a| a as i64))
        .bind(Value::Object(charged))
        .bind(Value::Object(plans))
        .bind(at(r.reserved_at_ms))
        .bind(at(r.at_ms))
        .bind(source.name())
        .bind(r.model.as_deref().map(|m| m.replace('\0', "")))
        .bind(&r.generation)
        .bind(if r.reserved_parts.is_empty() { None } else { Some(parts_text(&r.reserved_parts)) })
        .bind(r.deadline_ms.map(at))
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((id, reuse_of)) = row {
            if let Some(earlier) = reuse_of {
                tracing::warn!(tenant = %r.tenant, request_id = r.request_id, row = id, earlier, "a request id was used again after its done marker expired: written as a row of its own");
                reused += 1;
            }
            written.push((i, id));
        }
    }
    tx.commit().await?;
    Ok((written, reused))
}

/// The amounts of a JSON object column (`{"plan": 80, "<grant>": 20}`; `charged`,
/// `plan_periods`), entries that are not whole numbers left out.
fn amounts(v: Value) -> Vec<(String, u64)> {
    v.as_object().map(|o| o.iter().filter_map(|(k, n)| Some((k.clone(), n.as_u64()?))).collect()).unwrap_or_default()
}

/// What each bucket paid, from the `charged` column.
fn parts_of(charged: Value) -> Vec<client::quota::Part> {
    amounts(charged).into_iter().map(|(bucket, tokens)| client::quota::Part { bucket, tokens }).collect()
}

/// `bucket:amount,...`, as the scripts write a reservation's parts.
fn parts_text(parts: &[client::quota::Part]) -> String {
    parts.iter().map(|p| format!("{}:{}", p.bucket, p.tokens)).collect::<Vec<_>>().join(",")
}

/// The parts `parts_text` wrote (an entry that does not parse is left out).
fn parse_parts(text: &str) -> Vec<client::quota::Part> {
    text.split(',')
        .filter_map(|p| {
            let (bucket, tokens) = p.split_once(':')?;
            Some(client::quota::Part { bucket: bucket.to_owned(), tokens: tokens.parse().ok()? })
        })
        .collect()
}

/// How the latest reservation of each `(tenant, request id)` that finished within the
/// tenant's retention ended, as the ledger holds it, in one query. The latest: the latest
/// deadline (a request id reused while the ledger could not be asked has a reservation of
/// its own; an expiry and its late settle share their deadline, while their reservation
/// times may differ: each is computed from the TTL in force when its row was written).
/// Of its rows: its settle if it has one, else its release, else its expiry. Request ids
/// the ledger does not hold are absent.
pub async fn earlier(
    db: &PgPool,
    asked: &[(TenantId, RequestId)],
) -> Result<HashMap<(TenantId, RequestId), Earlier>, sqlx::Error> {
    if asked.is_empty() {
        return Ok(HashMap::new());
    }
    let tenants: Vec<&str> = asked.iter().map(|(t, _)| t.as_str()).collect();
    let ids: Vec<&str> = asked.iter().map(|(_, r)| r.as_str()).collect();
    let rows = sqlx::query(
        "select distinct on (l.tenant, l.request_id)
                l.tenant, l.request_id, l.outcome, l.reserved, l.actual, l.charged, l.reserved_parts, l.deadline,
                l.reserved_at
           from unnest($1::text[], $2::text[]) as a (tenant, request_id)
           join usage_ledger l on l.tenant = a.tenant and l.request_id = a.request_id
           join tenant t on t.name = l.tenant
          where l.at >= now() - make_interval(days => t.retention_days)
          order by l.tenant, l.request_id, l.deadline desc nulls last,
                   case l.outcome when 'settled' then 0 when 'released' then 1 else 2 end, l.reserved_at desc",
    )
    .bind(&tenants)
    .bind(&ids)
    .fetch_all(db)
    .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let (Ok(tenant), Ok(request)) =
            (TenantId::parse(r.try_get::<&str, _>("tenant")?), RequestId::parse(r.try_get::<&str, _>("request_id")?))
        else {
            continue;
        };
        let Some(outcome) = UsageOutcome::parse(r.try_get("outcome")?) else { continue };
        let charged = parts_of(r.try_get("charged")?);
        out.insert(
            (tenant, request),
            Earlier {
                outcome,
                reserved: r.try_get::<i64, _>("reserved")?.max(0) as u64,
                actual: r.try_get::<Option<i64>, _>("actual")?.unwrap_or(0).max(0) as u64,
                charged,
                reserved_parts: r.try_get::<Option<&str>, _>("reserved_parts")?.map(parse_parts),
                deadline_ms: r.try_get::<Option<DateTime<Utc>>, _>("deadline")?.map(|d| d.timestamp_millis()),
                reserved_at_ms: r.try_get::<DateTime<Utc>, _>("reserved_at")?.timestamp_millis(),
            },
        );
    }
    Ok(out)
}

/// Clears the `charge_pending` mark of rows whose charge to the counters was decided.
pub async fn charge_decided(db: &PgPool, ids: &[i64]) -> Result<(), sqlx::Error> {
    if !ids.is_empty() {
        sqlx::query("update usage_ledger set charge_pending = false where id = any($1)").bind(ids).execute(db).await?;
    }
    Ok(())
}

/// Settle rows still marked `charge_pending` (their charge was never decided: a failure or
/// a crash after their insert), oldest first, at most `limit`, as records with their ids.
pub async fn pending_charges(db: &PgPool, limit: i64) -> Result<Vec<(i64, UsageRecord, bool)>, sqlx::Error> {
    let rows = sqlx::query(
        "select id, tenant, request_id, late, reserved, actual, charged, plan_periods, reserved_at, at, source,
                model, coalesce(generation, '') as generation, reserved_parts, deadline
           from usage_ledger where charge_pending order by id limit $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let Ok(tenant) = TenantId::parse(r.try_get::<&str, _>("tenant")?) else { continue };
        let charged = parts_of(r.try_get("charged")?);
        let record = UsageRecord {
            tenant,
            request_id: r.try_get("request_id")?,
            outcome: client::quota::UsageOutcome::Settled,
            late: r.try_get("late")?,
            reserved: r.try_get::<i64, _>("reserved")?.max(0) as u64,
            actual: r.try_get::<Option<i64>, _>("actual")?.map(|a| a.max(0) as u64),
            charged,
            plan_periods: amounts(r.try_get("plan_periods")?),
            reserved_at_ms: r.try_get::<DateTime<Utc>, _>("reserved_at")?.timestamp_millis(),
            at_ms: r.try_get::<DateTime<Utc>, _>("at")?.timestamp_millis(),
            generation: r.try_get("generation")?,
            model: r.try_get("model")?,
            reserved_parts: parse_parts(r.try_get::<Option<&str>, _>("reserved_parts")?.unwrap_or_default()),
            deadline_ms: r.try_get::<Option<DateTime<Utc>>, _>("deadline")?.map(|d| d.timestamp_millis()),
            entry: None,
        };
        out.push((r.try_get("id")?, record, r.try_get::<&str, _>("source")? == "instance"));
    }
    Ok(out)
}

/// The tenants with ledger rows recorded before `before` still marked `charge_pending`
/// (the compensation passes over them until the retry has decided those rows).
pub async fn tenants_pending(db: &PgPool, before: DateTime<Utc>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select distinct tenant from usage_ledger where charge_pending and recorded_at < $1")
        .bind(before)
        .fetch_all(db)
        .await
}

/// How many settle rows wait for their charge to be decided.
pub async fn pending_count(db: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from usage_ledger where charge_pending").fetch_one(db).await
}

/// What the ledger says a tenant's counters hold: use per grant (all time), plan use per
/// period and requests per day since `since` (the previous period's start); with the open
/// transaction that holds the tenant's lock alone (commit it once the restore is published).
pub async fn restore(
    db: &PgPool,
    tenant: &TenantId,
    since: DateTime<Utc>,
) -> Result<(Restore, sqlx::Transaction<'static, sqlx::Postgres>), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("select pg_advisory_xact_lock(hashtext($1))").bind(lock_key(tenant)).execute(&mut *tx).await?;
    let upto: Option<i64> = sqlx::query_scalar("select max(id) from usage_ledger where tenant = $1")
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    let mut restore = Restore { upto: upto.unwrap_or(0), ..Restore::default() };
    let grants = sqlx::query(
        "select c.key, sum(c.value::bigint)::bigint as used
         from usage_ledger u, jsonb_each_text(u.charged) c
         where u.tenant = $1 and c.key <> 'plan' group by c.key",
    )
    .bind(tenant.as_str())
    .fetch_all(&mut *tx)
    .await?;
    for g in grants {
        restore.grant_used.insert(g.try_get("key")?, g.try_get::<i64, _>("used")?.max(0) as u64);
    }
    let plans = sqlx::query(
        "select p.key, sum(p.value::bigint)::bigint as used
         from usage_ledger u, jsonb_each_text(u.plan_periods) p
         where u.tenant = $1 and u.at >= $2 group by p.key",
    )
    .bind(tenant.as_str())
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for p in plans {
        restore.plan_used.insert(p.try_get("key")?, p.try_get::<i64, _>("used")?.max(0) as u64);
    }
    let days = sqlx::query(
        "select to_char(reserved_at at time zone 'UTC', 'YYYY-MM-DD') as day, count(distinct request_id) as n
         from usage_ledger where tenant = $1 and reserved_at >= $2 group by 1",
    )
    .bind(tenant.as_str())
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for d in days {
        restore.requests.insert(d.try_get("day")?, d.try_get::<i64, _>("n")?.max(0) as u64);
    }
    Ok((restore, tx))
}

/// A tenant's usage between two instants (`at` in `[from, to)`), grouped by UTC day or by
/// model; rows in key order.
pub async fn report(
    db: &PgPool,
    tenant: &TenantId,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group: Group,
) -> Result<Vec<UsageRow>, sqlx::Error> {
    let key = match group {
        Group::Day => "to_char(at at time zone 'UTC', 'YYYY-MM-DD')",
        Group::Model => "coalesce(model, 'unknown')",
    };
    let rows = sqlx::query(&format!(
        "select {key} as key,
                count(*) filter (where outcome = 'settled')::bigint as settled,
                count(*) filter (where outcome = 'released')::bigint as released,
                count(*) filter (where outcome = 'expired')::bigint as expired,
                coalesce(sum(actual) filter (where outcome = 'settled'), 0)::bigint as tokens,
                coalesce(sum((charged->>'plan')::bigint), 0)::bigint as plan_tokens,
                coalesce(sum(reserved) filter (where outcome = 'settled' and not late), 0)::bigint as reserved
         from usage_ledger where tenant = $1 and at >= $2 and at < $3
         group by 1 order by 1"
    ))
    .bind(tenant.as_str())
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            let tokens: i64 = r.try_get("tokens")?;
            let plan: i64 = r.try_get("plan_tokens")?;
            Ok(UsageRow {
                key: r.try_get("key")?,
                settled: r.try_get::<i64, _>("settled")? as u64,
                released: r.try_get::<i64, _>("released")? as u64,
                expired: r.try_get::<i64, _>("expired")? as u64,
                tokens: tokens as u64,
                plan_tokens: plan as u64,
                grant_tokens: (tokens - plan).max(0) as u64,
                reserved: r.try_get::<i64, _>("reserved")? as u64,
            })
        })
        .collect()
}

/// The ledger's totals of one tenant for the compensation: use per grant (all time) and
/// plan use of `period`, counting only rows finished at or before `until` and not in
/// `exclude` (request ids still in the stream, counted there: only rows of the day before
/// `until` are theirs, an older row of the same request id is an earlier use of it).
pub async fn totals(
    db: &PgPool,
    tenant: &TenantId,
    period: &str,
    until: DateTime<Utc>,
    exclude: &[String],
) -> Result<(u64, BTreeMap<String, u64>), sqlx::Error> {
    let plan: i64 = sqlx::query_scalar(
        "select coalesce(sum((plan_periods->>$2)::bigint), 0)::bigint from usage_ledger
         where tenant = $1 and at <= $3 and not (request_id = any($4) and at > $3 - interval '1 day')
           and plan_periods ? $2",
    )
    .bind(tenant.as_str())
    .bind(period)
    .bind(until)
    .bind(exclude)
    .fetch_one(db)
    .await?;
    let rows = sqlx::query(
        "select c.key, sum(c.value::bigint)::bigint as used
         from usage_ledger u, jsonb_each_text(u.charged) c
         where u.tenant = $1 and u.at <= $2 and not (u.request_id = any($3) and u.at > $2 - interval '1 day')
           and c.key <> 'plan'
         group by c.key",
    )
    .bind(tenant.as_str())
    .bind(until)
    .bind(exclude)
    .fetch_all(db)
    .await?;
    let mut grants = BTreeMap::new();
    for r in rows {
        grants.insert(r.try_get("key")?, r.try_get::<i64, _>("used")?.max(0) as u64);
    }
    Ok((plan.max(0) as u64, grants))
}

/// Tokens a tenant's ledger rows written since `since` charged (all buckets): rows whose
/// charge to the counters may be under way.
pub async fn recent_charges(db: &PgPool, tenant: &TenantId, since: DateTime<Utc>) -> Result<u64, sqlx::Error> {
    let n: i64 = sqlx::query_scalar(
        "select coalesce(sum(c.value::bigint), 0)::bigint
         from usage_ledger u, jsonb_each_text(u.charged) c where u.tenant = $1 and u.recorded_at >= $2",
    )
    .bind(tenant.as_str())
    .bind(since)
    .fetch_one(db)
    .await?;
    Ok(n.max(0) as u64)
}

/// Every tenant's name, in order (the tenants whose streams are drained).
pub async fn tenant_names(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select name from tenant order by name").fetch_all(db).await
}

/// Whether a tenant exists.
pub async fn tenant_exists(db: &PgPool, tenant: &TenantId) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from tenant where name = $1)").bind(tenant.as_str()).fetch_one(db).await
}

/// The UTC midnight starting `day`.
pub fn day_start(day: NaiveDate) -> DateTime<Utc> {
    day.and_hms_opt(0, 0, 0).expect("midnight").and_utc()
}
