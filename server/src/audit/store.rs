//! The audit trail: append-only, hash-chained rows (the database computes the chain; see
//! `migrations/0002_audit_outbox.sql`), listed with filters, verified, exported as CSV.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};

/// Where a change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Api,
    Ui,
    Health,
    Schedule,
    System,
    /// A ramp's own writes: its steps, breaches and aborts.
    Ramp,
}

impl Source {
    /// The name stored in the `source` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Ui => "ui",
            Self::Health => "health",
            Self::Schedule => "schedule",
            Self::System => "system",
            Self::Ramp => "ramp",
        }
    }
}

/// A change to record, in the same transaction as the change itself.
#[derive(Debug, Clone)]
pub struct NewAudit<'a> {
    pub actor: &'a str,
    pub source: Source,
    pub action: &'a str,
    pub entity: &'a str,
    pub before: Option<&'a serde_json::Value>,
    pub after: Option<&'a serde_json::Value>,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

/// One audit row as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub source: String,
    pub action: String,
    pub entity: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    pub reason: Option<String>,
    pub request_id: Option<String>,
    /// SHA-256 of the previous row (hex); absent on the first row.
    pub prev_hash: Option<String>,
    /// SHA-256 of this row's content and `prev_hash` (hex).
    pub hash: String,
}

/// The filters every listing shares; `$1`..`$5` are entity, actor, action, from, to.
const FILTERS: &str = "($1::text is null or entity = $1) and ($2::text is null or actor = $2)
    and ($3::text is null or action = $3) and ($4::timestamptz is null or at >= $4)
    and ($5::timestamptz is null or at < $5)";

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Binds `$1`..`$5` of [`FILTERS`].
fn bind_filters<'q>(query: PgQuery<'q>, filter: &'q AuditFilter) -> PgQuery<'q> {
    query.bind(&filter.entity).bind(&filter.actor).bind(&filter.action).bind(filter.from).bind(filter.to)
}

const COLUMNS: &str = "id, at, actor, source, action, entity, before, after, reason, request_id, \
                       encode(prev_hash, 'hex') as prev_hash, encode(hash, 'hex') as hash";

fn row(r: &sqlx::postgres::PgRow) -> Result<AuditRow, sqlx::Error> {
    Ok(AuditRow {
        id: r.try_get("id")?,
        at: r.try_get("at")?,
        actor: r.try_get("actor")?,
        source: r.try_get("source")?,
        action: r.try_get("action")?,
        entity: r.try_get("entity")?,
        before: r.try_get("before")?,
        after: r.try_get("after")?,
        reason: r.try_get("reason")?,
        request_id: r.try_get("request_id")?,
        prev_hash: r.try_get("prev_hash")?,
        hash: r.try_get("hash")?,
    })
}

/// Appends a row (its id and hash are given by the database, in writing order).
#[tracing::instrument(skip_all, fields(action = entry.action, entity = entry.entity), err)]
pub async fn insert_audit(tx: &mut PgConnection, entry: &NewAudit<'_>) -> Result<AuditRow, sqlx::Error> {
    let sql = format!(
        "insert into audit (actor, source, action, entity, before, after, reason, request_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8) returning {COLUMNS}"
    );
    let r = sqlx::query(&sql)
        .bind(entry.actor)
        .bind(entry.source.as_str())
        .bind(entry.action)
        .bind(entry.entity)
        .bind(entry.before)
        .bind(entry.after)
        .bind(entry.reason)
        .bind(entry.request_id)
        .fetch_one(tx)
        .await?;
    row(&r)
}

/// One row by id, inside a transaction (so a change can return the row it wrote).
pub async fn get_audit(tx: &mut PgConnection, id: i64) -> Result<AuditRow, sqlx::Error> {
    let r = sqlx::query(&format!("select {COLUMNS} from audit where id = $1")).bind(id).fetch_one(tx).await?;
    row(&r)
}

/// Which rows to list. Every filter is optional; rows come newest first, after `before_id`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditFilter {
    pub entity: Option<String>,
    pub actor: Option<String>,
    pub action: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    /// Cursor: only rows with a smaller id (the `next` of the previous page).
    pub before_id: Option<i64>,
    /// Page size, 1..=500 (default 100).
    pub limit: Option<i64>,
}

/// A page of rows and the cursor of the next one (`None` on the last page).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub rows: Vec<AuditRow>,
    pub next: Option<i64>,
}

/// Lists rows matching `filter`, newest first.
#[tracing::instrument(skip_all, err)]
pub async fn list_audit(db: &PgPool, filter: &AuditFilter) -> Result<AuditPage, sqlx::Error> {
    let limit = filter.limit.unwrap_or(100).clamp(1, 500);
    let sql = format!(
        "select {COLUMNS} from audit where {FILTERS} and ($6::bigint is null or id < $6)
         order by id desc limit $7"
    );
    let rows = bind_filters(sqlx::query(&sql), filter).bind(filter.before_id).bind(limit + 1).fetch_all(db).await?;
    let mut rows = rows.iter().map(row).collect::<Result<Vec<_>, _>>()?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| r.id)
    } else {
        None
    };
    Ok(AuditPage { rows, next })
}

/// The result of checking the whole chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChainReport {
    /// Every row's hash matches its content and its predecessor's hash, with no gap.
    pub intact: bool,
    pub rows: i64,
    /// The first row that does not match (edited, or following a removed row).
    pub first_broken: Option<i64>,
    /// Why it does not match: `content` (the row differs from its hash), `link` (its
    /// `prev_hash` is not the previous row's hash) or `gap` (a row before it is missing).
    pub problem: Option<String>,
    /// The newest row and its hash: kept outside the database (a log, a ticket), they let
    /// anyone detect a removed newest row or a chain rebuilt from an edited row on.
    pub head_id: Option<i64>,
    pub head_hash: Option<String>,
}

/// Recomputes every hash in order and reports the first row that breaks the chain.
#[tracing::instrument(skip_all, err)]
pub async fn verify_audit(db: &PgPool) -> Result<ChainReport, sqlx::Error> {
    let r = sqlx::query(
        "with checked as (
             select id,
                    hash = audit_row_hash(a) as content_ok,
                    prev_hash is not distinct from lag(hash) over (order by id) as link_ok,
                    id = row_number() over (order by id) as no_gap
             from audit a)
         select (select count(*) from audit) as rows,
                (select id from checked where not (content_ok and link_ok and no_gap) order by id limit 1) as broken,
                (select case when not no_gap then 'gap' when not content_ok then 'content' else 'link' end
                   from checked where not (content_ok and link_ok and no_gap) order by id limit 1) as problem,
                (select id from audit order by id desc limit 1) as head_id,
                (select encode(hash, 'hex') from audit order by id desc limit 1) as head_hash",
    )
    .fetch_one(db)
    .await?;
    let first_broken: Option<i64> = r.try_get("broken")?;
    Ok(ChainReport {
        intact: first_broken.is_none(),
        rows: r.try_get("rows")?,
        first_broken,
        problem: r.try_get("problem")?,
        head_id: r.try_get("head_id")?,
        head_hash: r.try_get("head_hash")?,
    })
}

/// Every row matching `filter` (ignoring its cursor and limit) as CSV, oldest first.
#[tracing::instrument(skip_all, err)]
pub async fn export_audit_csv(db: &PgPool, filter: &AuditFilter) -> Result<String, sqlx::Error> {
    let sql = format!(
        "select {COLUMNS}, before::text as before_text, after::text as after_text from audit
         where {FILTERS} order by id"
    );
    let rows = bind_filters(sqlx::query(&sql), filter).fetch_all(db).await?;
    let mut out = String::from("id,at,actor,source,action,entity,before,after,reason,request_id,prev_hash,hash\n");
    for r in &rows {
        let a = row(r)?;
        // The JSON exactly as stored (and hashed), not as re-serialised here.
        let before_text: Option<String> = r.try_get("before_text")?;
        let after_text: Option<String> = r.try_get("after_text")?;
        let fields = [
            a.id.to_string(),
            a.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            a.actor,
            a.source,
            a.action,
            a.entity,
            before_text.unwrap_or_default(),
            after_text.unwrap_or_default(),
            a.reason.unwrap_or_default(),
            a.request_id.unwrap_or_default(),
            a.prev_hash.unwrap_or_default(),
            a.hash,
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    Ok(out)
}

/// RFC 4180 quoting; a leading `=`, `+`, `-` or `@` is prefixed with `'` so that a
/// spreadsheet never runs an actor's or reason's text as a formula.
fn csv_field(value: &str) -> String {
    let safe = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{value}") } else { value.to_owned() };
    if safe.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", safe.replace('"', "\"\""))
    } else {
        safe
    }
}

#[cfg(test)]
mod tests {
    use super::csv_field;

    #[test]
    fn csv_fields_are_quoted_and_formulas_defused() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=cmd()"), "'=cmd()");
    }
}
