//! The SQL of ramps: their rows, events, samples and the webhook notifications' outbox.

use api::ramps::RampState;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};

/// A ramp as stored.
#[derive(Debug, Clone, FromRow)]
pub struct RampRow {
    pub id: i64,
    pub pool: String,
    #[sqlx(try_from = "String")]
    pub state: RampState,
    pub plan: Value,
    pub baseline: Value,
    pub step: i32,
    pub config_version: i64,
    pub step_started_at: DateTime<Utc>,
    pub step_hits: Option<Value>,
    pub guard_state: Value,
    pub abort_from: Option<Value>,
    pub change_request: Option<i64>,
    pub created_by: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, pool, state, plan, baseline, step, config_version, step_started_at, step_hits, \
                       guard_state, abort_from, change_request, created_by, reason, created_at, updated_at, ended_at";

/// A new ramp, running at step 0 (the caller applies step 1 in the same transaction).
pub struct NewRamp<'a> {
    pub pool: &'a str,
    pub plan: &'a Value,
    pub baseline: &'a Value,
    pub config_version: i64,
    pub now: DateTime<Utc>,
    pub created_by: &'a str,
    pub reason: &'a str,
    pub change_request: Option<i64>,
}

pub async fn insert_ramp(tx: &mut PgConnection, new: &NewRamp<'_>) -> Result<RampRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "insert into ramp (pool, state, plan, baseline, step, config_version, step_started_at, created_by, reason, \
                           change_request, created_at, updated_at)
         values ($1, $9, $2, $3, 0, $4, $5, $6, $7, $8, $5, $5) returning {COLUMNS}"
    ))
    .bind(new.pool)
    .bind(new.plan)
    .bind(new.baseline)
    .bind(new.config_version)
    .bind(new.now)
    .bind(new.created_by)
    .bind(new.reason)
    .bind(new.change_request)
    .bind(RampState::Running.as_str())
    .fetch_one(&mut *tx)
    .await
}

/// The live ramp of a pool, if any.
pub async fn live_ramp_of(tx: &mut PgConnection, pool: &str) -> Result<Option<i64>, sqlx::Error> {
    // The states as literals: the predicate of the partial index `ramp_live_per_pool`.
    let live = crate::store::sql_names(&RampState::names(&RampState::LIVE));
    sqlx::query_scalar(&format!("select id from ramp where pool = $1 and state in ({live})"))
        .bind(pool)
        .fetch_optional(&mut *tx)
        .await
}

/// A ramp, locked for the caller's transaction.
pub async fn ramp_for_update(tx: &mut PgConnection, id: i64) -> Result<Option<RampRow>, sqlx::Error> {
    sqlx::query_as(&format!("select {COLUMNS} from ramp where id = $1 for update"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
}

pub async fn ramp(db: &PgPool, id: i64) -> Result<Option<RampRow>, sqlx::Error> {
    sqlx::query_as(&format!("select {COLUMNS} from ramp where id = $1")).bind(id).fetch_optional(db).await
}

/// The ramps the job evaluates: running and aborting ones.
pub async fn active_ramps(db: &PgPool) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("select id from ramp where state = any($1) order by id")
        .bind(RampState::names(&[RampState::Running, RampState::Aborting]))
        .fetch_all(db)
        .await
}

/// Live ramps per state.
pub async fn live_ramp_counts(db: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as("select state, count(*) from ramp where state = any($1) group by state")
        .bind(RampState::names(&RampState::LIVE))
        .fetch_all(db)
        .await
}

/// Webhook notifications neither delivered nor given up.
pub async fn pending_notifications(db: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from notification where delivered_at is null and failed_at is null")
        .fetch_one(db)
        .await
}

/// Ramps newest first: of one pool, or every pool's; only live ones when asked.
pub async fn list_ramps(
    db: &PgPool,
    pool: Option<&str>,
    live_only: bool,
    limit: i64,
) -> Result<Vec<RampRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from ramp
         where ($1::text is null or pool = $1)
           and (not $2 or state = any($4))
         order by id desc limit $3"
    ))
    .bind(pool)
    .bind(live_only)
    .bind(limit)
    .bind(RampState::names(&RampState::LIVE))
    .fetch_all(db)
    .await
}

/// Writes a ramp's moving parts back.
pub async fn save_ramp(tx: &mut PgConnection, r: &RampRow) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update ramp set state = $2, step = $3, config_version = $4, step_started_at = $5, step_hits = $6,
                         guard_state = $7, abort_from = $8, updated_at = $9, ended_at = $10
         where id = $1",
    )
    .bind(r.id)
    .bind(r.state.as_str())
    .bind(r.step)
    .bind(r.config_version)
    .bind(r.step_started_at)
    .bind(&r.step_hits)
    .bind(&r.guard_state)
    .bind(&r.abort_from)
    .bind(r.updated_at)
    .bind(r.ended_at)
    .execute(&mut *tx)
    .await
    .map(|_| ())
}

/// An event of a ramp.
#[derive(Debug, Clone, FromRow)]
pub struct EventRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub step: i32,
    pub actor: String,
    pub sentence: String,
    pub measured: Option<Value>,
    pub audit_id: Option<i64>,
}

pub struct NewEvent<'a> {
    pub ramp: i64,
    pub at: DateTime<Utc>,
    pub kind: &'a str,
    pub step: i32,
    pub actor: &'a str,
    pub sentence: &'a str,
    pub measured: Option<&'a Value>,
    pub audit_id: Option<i64>,
}

pub async fn insert_event(tx: &mut PgConnection, e: &NewEvent<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "insert into ramp_event (ramp_id, at, kind, step, actor, sentence, measured, audit_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8) returning id",
    )
    .bind(e.ramp)
    .bind(e.at)
    .bind(e.kind)
    .bind(e.step)
    .bind(e.actor)
    .bind(e.sentence)
    .bind(e.measured)
    .bind(e.audit_id)
    .fetch_one(&mut *tx)
    .await
}

/// A ramp's events, oldest first.
pub async fn events(db: &PgPool, ramp: i64) -> Result<Vec<EventRow>, sqlx::Error> {
    sqlx::query_as(
        "select id, at, kind, step, actor, sentence, measured, audit_id from ramp_event where ramp_id = $1 order by id",
    )
    .bind(ramp)
    .fetch_all(db)
    .await
}

/// Records one evaluation's measurements (once per instant).
pub async fn insert_sample(
    tx: &mut PgConnection,
    ramp: i64,
    at: DateTime<Utc>,
    step: i32,
    measured: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query("insert into ramp_sample (ramp_id, at, step, measured) values ($1, $2, $3, $4) on conflict do nothing")
        .bind(ramp)
        .bind(at)
        .bind(step)
        .bind(measured)
        .execute(&mut *tx)
        .await
        .map(|_| ())
}

/// A ramp's newest `limit` samples, oldest first.
pub async fn samples(db: &PgPool, ramp: i64, limit: i64) -> Result<Vec<(DateTime<Utc>, i32, Value)>, sqlx::Error> {
    sqlx::query_as(
        "select at, step, measured from (
             select at, step, measured from ramp_sample where ramp_id = $1 order by at desc limit $2
         ) newest order by at",
    )
    .bind(ramp)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The pool's configuration version now.
pub async fn config_version(tx: &mut PgConnection, pool: &str) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("select config_version from pool where name = $1").bind(pool).fetch_optional(&mut *tx).await
}

/// Queues a webhook notification in the caller's transaction.
pub async fn insert_notification(tx: &mut PgConnection, event: &str, body: &Value) -> Result<(), sqlx::Error> {
    sqlx::query("insert into notification (event, body) values ($1, $2)")
        .bind(event)
        .bind(body)
        .execute(&mut *tx)
        .await
        .map(|_| ())
}

/// Claims the notifications due at `now`, oldest first: each is leased for `lease_seconds`
/// (rows another instance holds are skipped), so two deliverers never send the same row.
pub async fn claim_notifications(
    db: &PgPool,
    now: DateTime<Utc>,
    limit: i64,
    lease_seconds: i64,
) -> Result<Vec<(i64, String, Value, i32)>, sqlx::Error> {
    sqlx::query_as(
        "update notification set next_attempt_at = $1 + make_interval(secs => $3)
         where id in (
             select id from notification
             where delivered_at is null and failed_at is null and next_attempt_at <= $1
             order by id limit $2 for update skip locked
         )
         returning id, event, body, attempts",
    )
    .bind(now)
    .bind(limit)
    .bind(lease_seconds as f64)
    .fetch_all(db)
    .await
    .map(|mut rows: Vec<(i64, String, Value, i32)>| {
        rows.sort_by_key(|r| r.0);
        rows
    })
}

pub async fn mark_delivered(db: &PgPool, id: i64, now: DateTime<Utc>) -> Result<(), sqlx::Error> {
    sqlx::query("update notification set delivered_at = $2, attempts = attempts + 1, last_error = null where id = $1")
        .bind(id)
        .bind(now)
        .execute(db)
        .await
        .map(|_| ())
}

/// A failed attempt: tried again at `next`, or given up (`next` = None).
pub async fn mark_failed(
    db: &PgPool,
    id: i64,
    error: &str,
    now: DateTime<Utc>,
    next: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update notification set attempts = attempts + 1, last_error = $2,
                next_attempt_at = coalesce($4, next_attempt_at), failed_at = case when $4 is null then $3 end
         where id = $1",
    )
    .bind(id)
    .bind(error.chars().take(500).collect::<String>())
    .bind(now)
    .bind(next)
    .execute(db)
    .await
    .map(|_| ())
}

/// Deletes ramp samples taken, and notifications delivered or given up, more than `days`
/// days ago (the daily prune, with the pool samples' retention); answers how many.
pub async fn prune(db: &PgPool, days: i32) -> Result<u64, sqlx::Error> {
    let samples = sqlx::query("delete from ramp_sample where at < now() - make_interval(days => $1)")
        .bind(days)
        .execute(db)
        .await?
        .rows_affected();
    let sent = sqlx::query(
        "delete from notification where coalesce(delivered_at, failed_at) < now() - make_interval(days => $1)",
    )
    .bind(days)
    .execute(db)
    .await?
    .rows_affected();
    Ok(samples + sent)
}
