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

/// Appends a row (its id and hash are given by the database, in writing order) and, when
/// the process has an audit key, its signature, in the same transaction.
#[tracing::instrument(skip_all, fields(action = entry.action, entity = entry.entity), err)]
pub async fn insert_audit(tx: &mut PgConnection, entry: &NewAudit<'_>) -> Result<AuditRow, sqlx::Error> {
    let sql = format!(
        "insert into audit as a (actor, source, action, entity, before, after, reason, request_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8) returning {COLUMNS}, {SIGNED}"
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
    let written = row(&r)?;
    if let Some(mac) = super::key::sign_row(&signed_content(&r)?) {
        sqlx::query("insert into audit_mac (id, mac) values ($1, $2)").bind(written.id).bind(mac).execute(tx).await?;
    }
    Ok(written)
}

/// The stored columns a signature covers, as the database holds them (the JSON as stored,
/// the hashes as bytes), for [`signed_content`].
const SIGNED: &str = "a.id as s_id, a.at as s_at, a.actor as s_actor, a.source as s_source, a.action as s_action,
    a.entity as s_entity, a.before::text as s_before, a.after::text as s_after, a.reason as s_reason,
    a.request_id as s_request_id, a.prev_hash as s_prev_hash, a.hash as s_hash";

/// The bytes a row's signature covers: every column of [`SIGNED`] in order, each as a
/// presence byte, a length and its bytes, so that no two rows encode alike.
fn signed_content(r: &sqlx::postgres::PgRow) -> Result<Vec<u8>, sqlx::Error> {
    fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
        match value {
            None => out.push(0),
            Some(bytes) => {
                out.push(1);
                out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    let mut out = Vec::with_capacity(256);
    let id: i64 = r.try_get("s_id")?;
    let at: DateTime<Utc> = r.try_get("s_at")?;
    field(&mut out, Some(&id.to_be_bytes()));
    field(&mut out, Some(&at.timestamp_micros().to_be_bytes()));
    for column in ["s_actor", "s_source", "s_action", "s_entity"] {
        let text: String = r.try_get(column)?;
        field(&mut out, Some(text.as_bytes()));
    }
    for column in ["s_before", "s_after", "s_reason", "s_request_id"] {
        let text: Option<String> = r.try_get(column)?;
        field(&mut out, text.as_deref().map(str::as_bytes));
    }
    for column in ["s_prev_hash", "s_hash"] {
        let bytes: Option<Vec<u8>> = r.try_get(column)?;
        field(&mut out, bytes.as_deref());
    }
    Ok(out)
}

/// What `tessera audit adopt` signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Adoption {
    /// Rows signed now.
    pub signed: u64,
    /// The newest row signed and its hash (hex): record them outside the database.
    pub through_id: Option<i64>,
    pub through_hash: Option<String>,
}

/// Signs the history written before the audit key was set: the unsigned rows before the
/// first signed one (every row when none is signed), once the hash chain up to there is
/// checked intact. Run by a person (`tessera audit adopt`), never by the server on its
/// own: signing whatever is unsigned at start would bless a rewrite made while the server
/// was down. Unsigned rows after a signed one are never signed (`verify` reports them).
#[tracing::instrument(skip_all, err)]
pub async fn adopt_unsigned_history(db: &PgPool) -> anyhow::Result<Adoption> {
    anyhow::ensure!(super::key::keyed(), "TESSERA_AUDIT_KEY is not set: there is no key to sign the history with");
    let mut tx = db.begin().await?;
    // The chain's own lock: no row is written (nor adopted by another process) meanwhile.
    sqlx::query("select pg_advisory_xact_lock(hashtext('tessera.audit.chain'))").execute(&mut *tx).await?;
    let first_signed: Option<i64> = sqlx::query_scalar("select min(id) from audit_mac").fetch_one(&mut *tx).await?;
    let start: i64 = sqlx::query_scalar("select least(1, coalesce(min(id), 1)) from audit").fetch_one(&mut *tx).await?;
    let broken: Option<(i64, String)> = sqlx::query_as(&format!(
        "{CHECKED} select id, {PROBLEM} from checked where not ok and ($3::bigint is null or id < $3) order by id limit 1"
    ))
    .bind(start)
    .bind(None::<Vec<u8>>)
    .bind(first_signed)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some((id, problem)) = broken {
        anyhow::bail!("the audit chain is broken at row {id} ({problem}): its history is not signed");
    }
    let rows = sqlx::query(&format!(
        "select {SIGNED} from audit a where not exists (select 1 from audit_mac m where m.id = a.id)
           and ($1::bigint is null or a.id < $1) order by a.id"
    ))
    .bind(first_signed)
    .fetch_all(&mut *tx)
    .await?;
    let mut through = None;
    for chunk in rows.chunks(1000) {
        let mut ids = Vec::with_capacity(chunk.len());
        let mut macs = Vec::with_capacity(chunk.len());
        for r in chunk {
            let id: i64 = r.try_get("s_id")?;
            let hash: Vec<u8> = r.try_get("s_hash")?;
            ids.push(id);
            macs.push(super::key::sign_row(&signed_content(r)?).expect("keyed"));
            through = Some((id, hex(&hash)));
        }
        sqlx::query("insert into audit_mac (id, mac) select * from unnest($1::bigint[], $2::bytea[])")
            .bind(&ids)
            .bind(&macs)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Adoption {
        signed: rows.len() as u64,
        through_id: through.as_ref().map(|(id, _)| *id),
        through_hash: through.map(|(_, hash)| hash),
    })
}

/// Whether rows written before the key was set wait for `tessera audit adopt`: unsigned
/// rows before the first signed one (or rows and no signature at all).
pub async fn unadopted_history(db: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "select exists (select 1 from audit a where a.id < coalesce((select min(id) from audit_mac), 9223372036854775807)
                          and not exists (select 1 from audit_mac m where m.id = a.id))",
    )
    .fetch_one(db)
    .await
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

/// The result of checking the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChainReport {
    /// Every row checked matches its content, its predecessor's hash and (with a key) its
    /// signature, with no gap.
    pub intact: bool,
    /// Rows in the trail: the head's id (ids are given from 1 without gaps).
    pub rows: i64,
    /// The first row that does not match (edited, or following a removed row).
    pub first_broken: Option<i64>,
    /// Why it does not match: `content` (the row differs from its hash), `link` (its
    /// `prev_hash` is not the previous row's hash), `gap` (a row before it is missing),
    /// `signature` (its signature is not the key's over its hash: rewritten, hashes
    /// recomputed) or `unsigned` (no signature, after signed rows).
    pub problem: Option<String>,
    /// The newest row and its hash: kept outside the database (a log, a ticket), they let
    /// anyone detect a removed newest row or a chain rebuilt from an edited row on.
    pub head_id: Option<i64>,
    pub head_hash: Option<String>,
    /// Rows are signed with the audit key (`TESSERA_AUDIT_KEY`) and signatures were checked.
    pub keyed: bool,
    /// The signed checkpoint the check started after (rows up to it were found intact by an
    /// earlier check); `None` when every row was checked.
    pub checkpoint_id: Option<i64>,
    /// The first row checked this time.
    pub checked_from: i64,
}

/// Each row from `$1` on, with whether its content matches its hash (`content_ok`), its
/// `prev_hash` its predecessor's hash or, for the first, `$2` (`link_ok`), and no row is
/// missing before it (`no_gap`); `ok` is all three.
const CHECKED: &str = "with checked0 as (
         select id,
                hash = audit_row_hash(a) as content_ok,
                prev_hash is not distinct from coalesce(lag(hash) over (order by id), $2::bytea) as link_ok,
                id = $1 - 1 + row_number() over (order by id) as no_gap
         from audit a where id >= $1),
     checked as (select *, content_ok and link_ok and no_gap as ok from checked0)";

/// The name of a row's problem in [`CHECKED`].
const PROBLEM: &str = "case when not no_gap then 'gap' when not content_ok then 'content' else 'link' end as problem";

/// Checks the chain: from the newest signed checkpoint that still matches its row
/// (incremental), or from the first row when `full` or when no checkpoint holds. With a
/// key, each row's signature is checked too (over the row's content, so a database whose
/// hash function was replaced is still caught), and an intact chain gets a new checkpoint
/// at its head.
#[tracing::instrument(skip_all, err)]
pub async fn verify_audit(db: &PgPool, full: bool) -> Result<ChainReport, sqlx::Error> {
    use futures::TryStreamExt;
    let keyed = super::key::keyed();
    let checkpoint = if keyed && !full { holding_checkpoint(db).await? } else { None };
    // Without a checkpoint, from the smallest id: a row with an id below 1 is a gap at row 1.
    let checked_from = match &checkpoint {
        Some((id, _)) => id + 1,
        None => sqlx::query_scalar("select least(1, coalesce(min(id), 1)) from audit").fetch_one(db).await?,
    };
    let r = sqlx::query(&format!(
        "{CHECKED}, first as (select id, {PROBLEM} from checked where not ok order by id limit 1)
         select (select id from first) as broken, (select problem from first) as problem,
                (select id from audit order by id desc limit 1) as head_id,
                (select hash from audit order by id desc limit 1) as head_hash"
    ))
    .bind(checked_from)
    .bind(checkpoint.as_ref().map(|(_, hash)| hash.clone()))
    .fetch_one(db)
    .await?;
    let mut first_broken: Option<i64> = r.try_get("broken")?;
    let mut problem: Option<String> = r.try_get("problem")?;
    let head_id: Option<i64> = r.try_get("head_id")?;
    let head_hash: Option<Vec<u8>> = r.try_get("head_hash")?;
    if keyed {
        // Signatures, row by row, streamed: only rows before the first broken one matter.
        let sql = format!(
            "select {SIGNED}, m.mac from audit a left join audit_mac m on m.id = a.id
             where a.id >= $1 and ($2::bigint is null or a.id < $2) order by a.id"
        );
        let mut rows = sqlx::query(&sql).bind(checked_from).bind(first_broken).fetch(db);
        while let Some(r) = rows.try_next().await? {
            let mac: Option<Vec<u8>> = r.try_get("mac")?;
            let bad = match &mac {
                None => Some("unsigned"),
                Some(mac) if !super::key::row_signed(&signed_content(&r)?, mac) => Some("signature"),
                Some(_) => None,
            };
            if let Some(bad) = bad {
                first_broken = Some(r.try_get("s_id")?);
                problem = Some(bad.to_owned());
                break;
            }
        }
    }
    if first_broken.is_none() && keyed {
        if let (Some(id), Some(hash)) = (head_id, &head_hash) {
            if checkpoint.as_ref().is_none_or(|(at, _)| *at < id) {
                let mac = super::key::sign_checkpoint(id, hash);
                sqlx::query(
                    "insert into audit_checkpoint (id, hash, mac) values ($1, $2, $3) on conflict (id) do nothing",
                )
                .bind(id)
                .bind(hash)
                .bind(mac)
                .execute(db)
                .await?;
            }
        }
    }
    Ok(ChainReport {
        intact: first_broken.is_none(),
        // Ids are given without gaps from 1 (the insert trigger), so the head's id is the
        // count in an intact chain, without counting a growing table.
        rows: head_id.unwrap_or(0),
        first_broken,
        problem,
        head_id,
        head_hash: head_hash.map(|h| hex(&h)),
        keyed,
        checkpoint_id: checkpoint.map(|(id, _)| id),
        checked_from,
    })
}

/// How many checkpoints, newest first, are tried before checking every row: the server's
/// role may insert checkpoints (it must, to record one), so forged ones are passed over.
const CHECKPOINTS_TRIED: i64 = 32;

/// The newest checkpoint whose signature is the key's and whose row still has its hash.
async fn holding_checkpoint(db: &PgPool) -> Result<Option<(i64, Vec<u8>)>, sqlx::Error> {
    let newest: Vec<(i64, Vec<u8>, Vec<u8>, Option<Vec<u8>>)> = sqlx::query_as(
        "select c.id, c.hash, c.mac, a.hash from audit_checkpoint c left join audit a on a.id = c.id
         order by c.id desc limit $1",
    )
    .bind(CHECKPOINTS_TRIED)
    .fetch_all(db)
    .await?;
    for (id, hash, mac, row_hash) in newest {
        if super::key::checkpoint_signed(id, &hash, &mac) && row_hash.as_deref() == Some(&hash[..]) {
            return Ok(Some((id, hash)));
        }
        tracing::warn!(checkpoint = id, "an audit checkpoint does not hold (forged, or its row was rewritten)");
    }
    Ok(None)
}

/// The report for people, one line per fact.
pub fn render_report(report: &ChainReport) -> String {
    let mut out = String::new();
    match (report.first_broken, &report.problem) {
        (Some(id), problem) => out.push_str(&format!(
            "BROKEN at row {id} ({}): the first row that was edited, removed or rewritten\n",
            problem.as_deref().unwrap_or("?")
        )),
        (None, _) => out.push_str("intact\n"),
    }
    out.push_str(&format!("rows: {}, checked from row {}", report.rows, report.checked_from));
    if let Some(id) = report.checkpoint_id {
        out.push_str(&format!(" (after signed checkpoint {id})"));
    }
    out.push('\n');
    out.push_str(if report.keyed {
        "signatures: checked (TESSERA_AUDIT_KEY)\n"
    } else {
        "signatures: NOT checked (TESSERA_AUDIT_KEY is not set): a rewrite with recomputed hashes would pass\n"
    });
    if let (Some(id), Some(hash)) = (report.head_id, &report.head_hash) {
        out.push_str(&format!("head: row {id}, hash {hash}\n"));
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Rows per page of the CSV export.
const CSV_PAGE: i64 = 1000;

const CSV_HEADER: &str = "id,at,actor,source,action,entity,before,after,reason,request_id,prev_hash,hash\n";

/// Every row matching `filter` (ignoring its cursor and limit) as CSV, oldest first,
/// streamed a page of [`CSV_PAGE`] rows at a time: each page is its own query, so neither
/// the whole trail nor a connection is held while the client reads.
pub fn export_audit_csv(
    db: PgPool,
    filter: AuditFilter,
) -> impl futures::Stream<Item = Result<String, sqlx::Error>> + 'static {
    // From the smallest id there is (a row with an id below 1 is exported too).
    futures::stream::unfold(Some(i64::MIN), move |after| {
        let (db, filter) = (db.clone(), filter.clone());
        async move {
            let after = after?;
            match csv_page(&db, &filter, after).await {
                Err(e) => Some((Err(e), None)),
                Ok((mut text, last, full_page)) => {
                    if after == i64::MIN {
                        text.insert_str(0, CSV_HEADER);
                    }
                    Some((Ok(text), last.filter(|_| full_page)))
                }
            }
        }
    })
}

/// The CSV lines of the rows after id `after`; the last id and whether the page was full.
async fn csv_page(db: &PgPool, filter: &AuditFilter, after: i64) -> Result<(String, Option<i64>, bool), sqlx::Error> {
    let sql = format!(
        "select {COLUMNS}, before::text as before_text, after::text as after_text from audit
         where {FILTERS} and id > $6 order by id limit $7"
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
    Ok((out, last, rows.len() as i64 == CSV_PAGE))
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
