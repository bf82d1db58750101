//! The audit trail: append-only, hash-chained rows (the database computes the chain, see
//! `migrations/0002_audit_outbox.sql`; the server checks it, see [`super::chain`]), written,
//! listed with filters and exported as CSV.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};

pub use super::chain::store::{
    adopt_unsigned_history, render_report, signed_history, try_verify_audit, unadopted_history, verify_audit, Adoption,
    ChainReport,
};
use super::chain::StoredRow;
use crate::inputs::hex;

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

/// A row's time when chrono can hold it (the server writes only the present; an owner can
/// write `infinity` or a year past 262143, which would not decode): else the epoch in a
/// list, and nothing for the chain check, which reports the row.
const COLUMNS: &str = "id, coalesce(case when at between timestamptz '1970-01-01Z' and timestamptz '9999-12-31Z' \
                       then at end, timestamptz '1970-01-01Z') as at, actor, source, action, entity, before, after, \
                       reason, request_id, encode(prev_hash, 'hex') as prev_hash, encode(hash, 'hex') as hash";

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

/// Appends a row and, when the process has an audit key, its signature, in the same
/// transaction. The database gives the id, the time and the hash (its insert trigger); the
/// server signs only what it checked itself: the row returned is the one it sent, appended
/// right after the head it read under the chain's lock, at about its own clock's time,
/// with the hash it computes. A trigger of the schema's owner that changed the row, or put
/// it anywhere but at the head, makes the write fail instead of getting it signed.
#[tracing::instrument(skip_all, fields(action = entry.action, entity = entry.entity), err)]
pub async fn insert_audit(tx: &mut PgConnection, entry: &NewAudit<'_>) -> Result<AuditRow, sqlx::Error> {
    let keyed = super::key::keyed();
    // The chain's lock (the insert trigger takes it too): the head read now stays the head.
    sqlx::query("select pg_advisory_xact_lock(hashtext('tessera.audit.chain'))").execute(&mut *tx).await?;
    let head: Option<(i64, Vec<u8>)> =
        sqlx::query_as("select id, hash from audit order by id desc limit 1").fetch_optional(&mut *tx).await?;
    if !keyed && super::chain::store::signed_history(&mut *tx).await? {
        return Err(refused(
            "the audit trail is signed but this process has no TESSERA_AUDIT_KEY: its row would stay unsigned",
        ));
    }
    let sql = format!(
        "insert into audit as a (actor, source, action, entity, before, after, reason, request_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         returning {STORED}, $5::jsonb::text as sent_before, $6::jsonb::text as sent_after"
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
        .fetch_one(&mut *tx)
        .await?;
    let stored = stored_row(&r)?;
    // The JSON sent, as Postgres prints it (key order, spacing): what is stored must be
    // exactly that text, not only mean the same.
    let sent: (Option<String>, Option<String>) = (r.try_get("sent_before")?, r.try_get("sent_after")?);
    if let Err(what) = written_as_sent(&stored, entry, &sent, head.as_ref()) {
        tracing::error!(id = stored.id, what, "an audit row was not written as sent: an insert trigger changed it?");
        return Err(refused(&format!("the audit row was not written as sent ({what})")));
    }
    if let Some(mac) = super::key::sign_row(&stored.signed_content()) {
        sqlx::query("insert into audit_mac (id, mac) values ($1, $2)").bind(stored.id).bind(mac).execute(tx).await?;
    }
    Ok(AuditRow {
        id: stored.id,
        at: stored.at.expect("checked to be about now"),
        actor: stored.actor,
        source: stored.source,
        action: stored.action,
        entity: stored.entity,
        before: entry.before.cloned(),
        after: entry.after.cloned(),
        reason: stored.reason,
        request_id: stored.request_id,
        prev_hash: stored.prev_hash.as_deref().map(hex),
        hash: hex(&stored.hash),
    })
}

/// How far the database's clock may be from the server's when a row is written.
const CLOCK_SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Whether the row returned by the insert is the entry sent (its JSON as Postgres prints
/// the JSON sent: `sent`), appended after `head`, at about now, with the hash of its
/// content; else what differs.
fn written_as_sent(
    stored: &StoredRow,
    entry: &NewAudit<'_>,
    sent: &(Option<String>, Option<String>),
    head: Option<&(i64, Vec<u8>)>,
) -> Result<(), &'static str> {
    let texts = (&stored.actor[..], &stored.source[..], &stored.action[..], &stored.entity[..]);
    if texts != (entry.actor, entry.source.as_str(), entry.action, entry.entity)
        || stored.reason.as_deref() != entry.reason
        || stored.request_id.as_deref() != entry.request_id
    {
        return Err("content");
    }
    if (&stored.before, &stored.after) != (&sent.0, &sent.1) {
        return Err("content");
    }
    if stored.id != head.map_or(1, |(id, _)| id + 1) || stored.prev_hash.as_ref() != head.map(|(_, hash)| hash) {
        return Err("position");
    }
    if stored.at.is_none_or(|at| (at - Utc::now()).abs() > CLOCK_SKEW) {
        return Err("time");
    }
    if stored.computed_hash() != stored.hash {
        return Err("hash");
    }
    Ok(())
}

/// An audit write refused by the server itself (a 500: the operator must look).
fn refused(message: &str) -> sqlx::Error {
    sqlx::Error::Protocol(message.to_owned())
}

/// The stored columns of a row for [`stored_row`]: the JSON as stored, the hashes as bytes.
pub(crate) const STORED: &str = "a.id,
    case when a.at between timestamptz '1970-01-01Z' and timestamptz '9999-12-31Z' then a.at end as at, a.actor, a.source, a.action, a.entity, a.before::text as before_text,
    a.after::text as after_text, a.reason, a.request_id, a.prev_hash, a.hash";

/// A row of [`STORED`].
pub(crate) fn stored_row(r: &sqlx::postgres::PgRow) -> Result<StoredRow, sqlx::Error> {
    Ok(StoredRow {
        id: r.try_get("id")?,
        at: r.try_get("at")?,
        actor: r.try_get("actor")?,
        source: r.try_get("source")?,
        action: r.try_get("action")?,
        entity: r.try_get("entity")?,
        before: r.try_get("before_text")?,
        after: r.try_get("after_text")?,
        reason: r.try_get("reason")?,
        request_id: r.try_get("request_id")?,
        prev_hash: r.try_get("prev_hash")?,
        hash: r.try_get("hash")?,
    })
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

/// Rows per page of the CSV export.
const CSV_PAGE: i64 = 1000;

/// Every row matching `filter` (ignoring its cursor and limit) as CSV, oldest first,
/// streamed a page of [`CSV_PAGE`] rows at a time: each page is its own query, so neither
/// the whole trail nor a connection is held while the client reads.
pub fn export_audit_csv(
    db: PgPool,
    filter: AuditFilter,
) -> impl futures::Stream<Item = Result<String, sqlx::Error>> + 'static {
    // The cursor: `Some(None)` before the first page (every id, however small), `Some(Some(id))`
    // after a full page ending at `id`, `None` once done.
    futures::stream::unfold(Some(None), move |after: Option<Option<i64>>| {
        let (db, filter) = (db.clone(), filter.clone());
        async move {
            let after = after?;
            match csv_page(&db, &filter, after).await {
                Err(e) => Some((Err(e), None)),
                Ok((mut text, last, full_page)) => {
                    if after.is_none() {
                        text.insert_str(0, &format!("{}\n", super::csv::HEADER));
                    }
                    Some((Ok(text), last.filter(|_| full_page).map(Some)))
                }
            }
        }
    })
}

/// The CSV lines of the rows after id `after` (every row: `None`); the last id and whether
/// the page was full.
async fn csv_page(
    db: &PgPool,
    filter: &AuditFilter,
    after: Option<i64>,
) -> Result<(String, Option<i64>, bool), sqlx::Error> {
    let sql = format!(
        "select {COLUMNS}, before::text as before_text, after::text as after_text, m.mac from audit
           left join lateral (select encode(mac, 'hex') as mac from audit_mac where audit_mac.id = audit.id) m on true
         where {FILTERS} and ($6::bigint is null or id > $6) order by id limit $7"
    );
    let rows = bind_filters(sqlx::query(&sql), filter).bind(after).bind(CSV_PAGE).fetch_all(db).await?;
    let mut out = String::new();
    let mut last = None;
    for r in &rows {
        let a = row(r)?;
        last = Some(a.id);
        // The JSON exactly as stored (and hashed), not as re-serialised here.
        let before_text: Option<String> = r.try_get("before_text")?;
        let after_text: Option<String> = r.try_get("after_text")?;
        let mac: Option<String> = r.try_get("mac")?;
        // NULL and the empty string stay apart (super::csv), so the export can be verified.
        let fields = [
            Some(a.id.to_string()),
            Some(a.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
            Some(a.actor),
            Some(a.source),
            Some(a.action),
            Some(a.entity),
            before_text,
            after_text,
            a.reason,
            a.request_id,
            a.prev_hash,
            Some(a.hash),
            mac,
        ];
        let line: Vec<String> = fields.iter().map(|f| super::csv::field(f.as_deref())).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    Ok((out, last, rows.len() as i64 == CSV_PAGE))
}
