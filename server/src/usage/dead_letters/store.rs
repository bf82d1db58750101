//! The dead-letter list's SQL.

use chrono::{DateTime, Utc};
use client::quota::WaitingOp;
use sqlx::PgPool;

/// One operation set aside.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct DeadLetter {
    pub id: i64,
    /// The tenant named, which does not exist here.
    pub tenant: String,
    pub request_id: String,
    /// `admit` (admitted by the process while Redis was away), `settle` or `release`.
    pub operation: String,
    /// Tokens admitted (`admit`).
    pub tokens: Option<i64>,
    /// Tokens settled (`settle`, or an `admit` closed by a settle).
    pub actual: Option<i64>,
    /// How an admission was closed: `settled`, `released`, or open (absent).
    pub closed: Option<String>,
    /// The journal file it was taken from.
    pub journal: String,
    /// When it was set aside.
    pub at: DateTime<Utc>,
}

/// Which of `names` are tenants here.
pub async fn existing_tenants(db: &PgPool, names: &[String]) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select name from tenant where name = any($1)").bind(names).fetch_all(db).await
}

/// Writes `ops` (idempotently: one row per tenant, request id and operation), in one
/// statement.
pub async fn insert(db: &PgPool, ops: &[WaitingOp], journal: &str) -> Result<u64, sqlx::Error> {
    let column = |f: fn(&WaitingOp) -> Option<String>| ops.iter().map(f).collect::<Vec<_>>();
    let number = |f: fn(&WaitingOp) -> Option<u64>| {
        ops.iter().map(|o| f(o).map(|n| i64::try_from(n).unwrap_or(i64::MAX))).collect::<Vec<_>>()
    };
    let done = sqlx::query(
        "insert into quota_dead_letter (tenant, request_id, operation, tokens, actual, closed, journal)
         select t, r, o, n, a, c, $7 from unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[])
           as x(t, r, o, n, a, c)
         on conflict (journal, tenant, request_id, operation) do nothing",
    )
    .bind(column(|o| Some(o.tenant.to_string())))
    .bind(column(|o| Some(o.request_id.to_string())))
    .bind(column(|o| Some(o.operation.to_owned())))
    .bind(number(|o| o.tokens))
    .bind(number(|o| o.actual))
    .bind(column(|o| o.closed.map(str::to_owned)))
    .bind(journal)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// The newest rows first, before id `before` (all: `None`), at most `limit`; and how many
/// there are in all.
pub async fn list(db: &PgPool, before: Option<i64>, limit: i64) -> Result<(Vec<DeadLetter>, i64), sqlx::Error> {
    let rows = sqlx::query_as(
        "select id, tenant, request_id, operation, tokens, actual, closed, journal, at from quota_dead_letter
          where $1::bigint is null or id < $1 order by id desc limit $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await?;
    let total = sqlx::query_scalar("select count(*) from quota_dead_letter").fetch_one(db).await?;
    Ok((rows, total))
}
