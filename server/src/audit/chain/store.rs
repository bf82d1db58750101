//! Checking and signing the audit chain in Postgres, a page of rows at a time (so neither
//! a long trail nor a statement timeout stops a check): `verify` from the newest signed
//! checkpoint that holds, `adopt` for the history written before the key, and whether the
//! trail is signed at all. Every hash, link and signature is checked by [`Walk`].

use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};

use super::{Problem, StoredRow, Walk};
use crate::audit::key;
use crate::audit::store::{insert_audit, stored_row, NewAudit, Source, STORED};
use crate::inputs::hex;

/// Rows read per query, at most.
const PAGE: i64 = 1000;

/// The stored size of the JSON read per query, at most (bytes, as `pg_column_size`), past
/// the first row: a page of huge rows (someone with the server's role may insert them) is
/// read a few rows at a time, not a thousand.
const PAGE_BYTES: i64 = 16 * 1024 * 1024;

/// Checkpoints read per query, newest first, looking for one that holds.
const CHECKPOINTS_TRIED: i64 = 1000;

/// The rows after id `after` (every row: `None`) in id order, with their signatures: at
/// most [`PAGE`], and past the first, at most [`PAGE_BYTES`] of JSON. Empty at the end.
async fn page<'c, E>(db: E, after: Option<i64>) -> Result<Vec<(StoredRow, Option<Vec<u8>>)>, sqlx::Error>
where
    E: sqlx::Executor<'c, Database = sqlx::Postgres>,
{
    let rows = sqlx::query(&format!(
        "select * from (
           select {STORED}, m.mac,
                  row_number() over (order by a.id) as n,
                  sum(coalesce(pg_column_size(a.before), 0) + coalesce(pg_column_size(a.after), 0))
                    over (order by a.id) as bytes
             from audit a left join audit_mac m on m.id = a.id
            where a.id > coalesce($1::bigint, -9223372036854775808) order by a.id limit $2) p
          where n = 1 or bytes <= $3 order by id"
    ))
    .bind(after)
    .bind(PAGE)
    .bind(PAGE_BYTES)
    .fetch_all(db)
    .await?;
    rows.iter().map(|r| Ok((stored_row(r)?, r.try_get("mac")?))).collect()
}

/// Whether any row is signed: a process without the key must then not write unsigned rows.
pub async fn signed_history(db: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from audit_mac)").fetch_one(db).await
}

/// The result of checking the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChainReport {
    /// Every row checked matches its content, its predecessor's hash and (with a key) its
    /// signature, with no gap, and no checkpoint was found forged.
    pub intact: bool,
    /// Rows in the trail: the head's id (ids are given from 1 without gaps).
    pub rows: i64,
    /// The first row that does not match (edited, or following a removed row); for a
    /// `checkpoint` problem, the newest checkpoint that does not hold.
    pub first_broken: Option<i64>,
    /// Why: `content` (the row differs from its hash, recomputed by the server), `link`
    /// (its `prev_hash` is not the previous row's hash), `gap` (a row before it is
    /// missing), `signature` (its signature is not the key's over its content: rewritten,
    /// hashes recomputed), `unsigned` (no signature), `checkpoint` (a checkpoint that is
    /// not the key's, or whose row has another hash now) or `unkeyed` (the trail is signed
    /// but this process has no key: nothing vouches for it; `first_broken` is null).
    pub problem: Option<String>,
    /// The newest row and its hash: kept outside the database (a log, a ticket), they let
    /// anyone detect a removed newest row or a chain rebuilt from an edited row on.
    pub head_id: Option<i64>,
    pub head_hash: Option<String>,
    /// Rows are signed with the audit key (`TESSERA_AUDIT_KEY`) and signatures were checked.
    pub keyed: bool,
    /// The signed checkpoint the check started after (rows up to it were found intact by an
    /// earlier check, which this one does not repeat: `full` does); `None` when every row
    /// was checked.
    pub checkpoint_id: Option<i64>,
    /// The first row checked this time.
    pub checked_from: i64,
    /// Checkpoints newer than the one started from that do not hold: forged by someone
    /// with the server's database role, or their rows rewritten.
    pub forged_checkpoints: u64,
}

/// Checks the chain: from the newest signed checkpoint that still matches its row
/// (incremental), or from row 1 when `full` or when none holds; a page of rows at a time,
/// each row's hash recomputed here and, with a key, its signature checked. An intact
/// chain gets a new checkpoint at the last row checked.
#[tracing::instrument(skip_all, err)]
pub async fn verify_audit(db: &PgPool, full: bool) -> Result<ChainReport, sqlx::Error> {
    verify_now(db, full).await
}

/// [`verify_audit`] unless a check holding `one_at_a_time` (the server's) is under way:
/// `None` then, without waiting (the caller answers 429), so that requests cannot queue
/// checks of a long trail behind each other.
pub async fn try_verify_audit(
    db: &PgPool,
    full: bool,
    one_at_a_time: &tokio::sync::Mutex<()>,
) -> Result<Option<ChainReport>, sqlx::Error> {
    let Ok(_held) = one_at_a_time.try_lock() else { return Ok(None) };
    verify_now(db, full).await.map(Some)
}

async fn verify_now(db: &PgPool, full: bool) -> Result<ChainReport, sqlx::Error> {
    let keyed = key::keyed();
    let (holding, forged) = if keyed { holding_checkpoint(db).await? } else { (None, Forged::default()) };
    let checkpoint = holding.filter(|_| !full);
    let (mut walk, mut after) = match &checkpoint {
        Some((id, hash)) => (Walk::after(*id, hash.clone(), keyed), Some(*id)),
        None => (Walk::from_first(keyed), None),
    };
    let checked_from = checkpoint.as_ref().map_or(1, |(id, _)| id + 1);
    let mut broken: Option<(i64, Problem)> = None;
    'pages: loop {
        let rows = page(db, after).await?;
        for (row, mac) in &rows {
            if let Err(problem) = walk.step(row, mac.as_deref()) {
                broken = Some((row.id, problem));
                break 'pages;
            }
            after = Some(row.id);
        }
        if rows.is_empty() {
            break;
        }
    }
    if broken.is_none() && keyed {
        if let Some((id, hash)) = walk.last().filter(|(id, _)| checkpoint.as_ref().is_none_or(|(at, _)| at < id)) {
            sqlx::query("insert into audit_checkpoint (id, hash, mac) values ($1, $2, $3) on conflict do nothing")
                .bind(id)
                .bind(hash)
                .bind(key::sign_checkpoint(id, hash))
                .execute(db)
                .await?;
        }
    }
    let head: Option<(i64, Vec<u8>)> =
        sqlx::query_as("select id, hash from audit order by id desc limit 1").fetch_optional(db).await?;
    let (first_broken, problem) = match (broken, forged.newest) {
        (Some((id, problem)), _) => (Some(id), Some(problem.as_str().to_owned())),
        (None, Some(id)) => (Some(id), Some("checkpoint".to_owned())),
        (None, None) => (None, None),
    };
    // Without the key, a signed trail is not vouched for: a rewrite with recomputed
    // hashes passes every check this process can make.
    let unkeyed = !keyed && signed_history(&mut *db.acquire().await?).await?;
    Ok(ChainReport {
        intact: first_broken.is_none() && !unkeyed,
        problem: problem.or_else(|| unkeyed.then(|| "unkeyed".to_owned())),
        // Ids are given without gaps from 1 (the insert trigger), so the head's id is the
        // count in an intact chain, without counting a growing table.
        rows: head.as_ref().map_or(0, |(id, _)| *id),
        first_broken,
        head_id: head.as_ref().map(|(id, _)| *id),
        head_hash: head.map(|(_, hash)| hex(&hash)),
        keyed,
        checkpoint_id: checkpoint.map(|(id, _)| id),
        checked_from,
        forged_checkpoints: forged.count,
    })
}

/// A checkpoint's id, hash and signature, and the hash its row has now.
type CheckpointRow = (i64, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Whether a checkpoint is signed by the key and its row still has its hash.
fn holds(id: i64, hash: &[u8], mac: &[u8], row_hash: &Option<Vec<u8>>) -> bool {
    key::checkpoint_signed(id, hash, mac) && row_hash.as_deref() == Some(hash)
}

/// Checkpoints that do not hold: how many, and the newest.
#[derive(Debug, Default)]
struct Forged {
    count: u64,
    newest: Option<i64>,
}

/// The newest checkpoint whose signature is the key's and whose row still has its hash,
/// and the newer ones that do not hold. The server's role may insert checkpoints (it must,
/// to record one), so forged ones are passed over, a page at a time by the primary key
/// (however many were inserted above the one that holds, no row of the trail is read
/// again for them), and counted.
async fn holding_checkpoint(db: &PgPool) -> Result<(Option<(i64, Vec<u8>)>, Forged), sqlx::Error> {
    let mut forged = Forged::default();
    let mut before: Option<(i64, Vec<u8>)> = None;
    loop {
        let page: Vec<CheckpointRow> = sqlx::query_as(
            "select c.id, c.hash, c.mac, a.hash from audit_checkpoint c left join audit a on a.id = c.id
              where $1::bigint is null or (c.id, c.mac) < ($1, $2)
              order by c.id desc, c.mac desc limit $3",
        )
        .bind(before.as_ref().map(|(id, _)| *id))
        .bind(before.as_ref().map(|(_, mac)| mac.clone()))
        .bind(CHECKPOINTS_TRIED)
        .fetch_all(db)
        .await?;
        let Some(last) = page.last() else { break };
        before = Some((last.0, last.2.clone()));
        for (id, hash, mac, row_hash) in &page {
            if holds(*id, hash, mac, row_hash) {
                // Forgeries beside it at the same row, ordered after it by their bytes: only
                // one signature holds at a row (the key's over the row's hash), so every
                // other one there is forged.
                let beside: i64 =
                    sqlx::query_scalar("select count(*) from audit_checkpoint where id = $1 and mac < $2")
                        .bind(id)
                        .bind(mac)
                        .fetch_one(db)
                        .await?;
                if beside > 0 {
                    forged.count += beside as u64;
                    forged.newest.get_or_insert(*id);
                }
                if forged.count > 0 {
                    tracing::warn!(
                        count = forged.count,
                        newest = forged.newest,
                        "audit checkpoints that do not hold (forged, or their rows were rewritten)"
                    );
                }
                return Ok((Some((*id, hash.clone())), forged));
            }
            forged.count += 1;
            forged.newest.get_or_insert(*id);
        }
    }
    if forged.count > 0 {
        tracing::warn!(
            count = forged.count,
            newest = forged.newest,
            "audit checkpoints that do not hold (forged, or their rows were rewritten)"
        );
    }
    Ok((None, forged))
}

/// The report for people, one line per fact.
pub fn render_report(report: &ChainReport) -> String {
    let mut out = String::new();
    match (report.first_broken, report.problem.as_deref()) {
        (Some(id), Some("checkpoint")) => out.push_str(&format!(
            "BROKEN: checkpoint {id} does not hold (forged by someone with the server's database role, or its row rewritten)\n"
        )),
        (None, Some("unkeyed")) => out.push_str(
            "NOT VERIFIED: the trail is signed but TESSERA_AUDIT_KEY is not set; a rewrite with recomputed hashes \
             would pass the checks made without it\n",
        ),
        (Some(id), problem) => out.push_str(&format!(
            "BROKEN at row {id} ({}): the first row that was edited, removed or rewritten\n",
            problem.unwrap_or("?")
        )),
        (None, _) => out.push_str("intact\n"),
    }
    out.push_str(&format!("rows: {}, checked from row {}", report.rows, report.checked_from));
    if let Some(id) = report.checkpoint_id {
        out.push_str(&format!(" (after signed checkpoint {id}; --full checks every row)"));
    }
    out.push('\n');
    if report.forged_checkpoints > 0 {
        out.push_str(&format!("checkpoints that do not hold: {}\n", report.forged_checkpoints));
    }
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
/// first signed one (every row when none is signed), once the chain up to there is checked
/// intact by the server and found to pass through `anchor`, the head (id, hash) a person
/// recorded outside the database before the key was set. The database alone cannot fix
/// where an authentic history ends: its owner could remove every signature, rewrite the
/// rows with recomputed hashes and let the server sign a new row on top. With a signed row,
/// the history must also end at its `prev_hash` (vouched for by its signature). Refused when
/// a checkpoint signed with the key covers a row that is unsigned now (signatures were
/// removed). Run by a person (`tessera audit adopt`), never by the server on its own;
/// recorded as an audit row of its own.
#[tracing::instrument(skip_all, err)]
pub async fn adopt_unsigned_history(db: &PgPool, anchor: (i64, Vec<u8>)) -> anyhow::Result<Adoption> {
    anyhow::ensure!(key::keyed(), "TESSERA_AUDIT_KEY is not set: there is no key to sign the history with");
    let mut tx = db.begin().await?;
    // The chain's own lock: no row is written (nor adopted by another process) meanwhile.
    sqlx::query("select pg_advisory_xact_lock(hashtext('tessera.audit.chain'))").execute(&mut *tx).await?;
    let first_signed = sqlx::query(&format!(
        "select {STORED}, m.mac from audit a join audit_mac m on m.id = a.id order by a.id limit 1"
    ))
    .fetch_optional(&mut *tx)
    .await?;
    let end: (i64, Vec<u8>) = match first_signed {
        Some(r) => {
            let (row, mac): (StoredRow, Vec<u8>) = (stored_row(&r)?, r.try_get("mac")?);
            anyhow::ensure!(
                key::row_signed(&row.signed_content(), &mac),
                "row {}, the first signed one, does not carry the key's signature: the trail was rewritten \
                 (tessera audit verify --full names the first bad row)",
                row.id
            );
            match row.prev_hash {
                None => return Ok(Adoption { signed: 0, through_id: None, through_hash: None }),
                Some(hash) => (row.id - 1, hash),
            }
        }
        None => {
            let head: Option<(i64, Vec<u8>)> =
                sqlx::query_as("select id, hash from audit order by id desc limit 1").fetch_optional(&mut *tx).await?;
            match head {
                Some(head) => head,
                None => return Ok(Adoption { signed: 0, through_id: None, through_hash: None }),
            }
        }
    };
    let checkpoints: Vec<(i64, Vec<u8>, Vec<u8>)> =
        sqlx::query_as("select id, hash, mac from audit_checkpoint where id <= $1")
            .bind(end.0)
            .fetch_all(&mut *tx)
            .await?;
    anyhow::ensure!(
        !checkpoints.iter().any(|(id, hash, mac)| key::checkpoint_signed(*id, hash, mac)),
        "a checkpoint signed with this key covers rows that are unsigned now: signatures were removed; \
         the history is not signed again"
    );
    anyhow::ensure!(
        anchor.0 <= end.0,
        "--through {}: the unsigned history ends at row {} (hash {}); name a row up to it",
        anchor.0,
        end.0,
        hex(&end.1)
    );
    let mut walk = Walk::from_first(false);
    let mut after = None;
    let mut signed = 0u64;
    'pages: loop {
        let rows = page(&mut *tx, after).await?;
        let (mut ids, mut macs) = (Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()));
        for (row, _) in rows.iter().take_while(|(row, _)| row.id <= end.0) {
            if let Err(problem) = walk.step(row, None) {
                anyhow::bail!(
                    "the audit chain is broken at row {} ({}): its history is not signed",
                    row.id,
                    problem.as_str()
                );
            }
            anyhow::ensure!(
                row.id != anchor.0 || row.hash == anchor.1,
                "row {}'s hash is {}, not the {} recorded: the history was rewritten since; it is not signed",
                row.id,
                hex(&row.hash),
                hex(&anchor.1)
            );
            ids.push(row.id);
            macs.push(key::sign_row(&row.signed_content()).expect("keyed"));
            after = Some(row.id);
        }
        sqlx::query("insert into audit_mac (id, mac) select * from unnest($1::bigint[], $2::bytea[])")
            .bind(&ids)
            .bind(&macs)
            .execute(&mut *tx)
            .await?;
        signed += ids.len() as u64;
        if ids.is_empty() || after == Some(end.0) {
            break 'pages;
        }
    }
    match walk.last() {
        Some((id, hash)) if id == end.0 && hash == &end.1[..] => {}
        last => anyhow::bail!(
            "the history does not end at row {} with hash {} (it ends at {}): it is not signed",
            end.0,
            hex(&end.1),
            last.map_or("no row".to_owned(), |(id, hash)| format!("row {id}, hash {}", hex(hash)))
        ),
    }
    let record = serde_json::json!({
        "signed": signed, "through_id": end.0, "through_hash": hex(&end.1),
        "anchor_id": anchor.0, "anchor_hash": hex(&anchor.1),
    });
    insert_audit(
        &mut tx,
        &NewAudit {
            actor: "system",
            source: Source::System,
            action: "audit.adopt",
            entity: "audit",
            before: None,
            after: Some(&record),
            reason: Some("the history written before TESSERA_AUDIT_KEY, signed by tessera audit adopt"),
            request_id: None,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Adoption { signed, through_id: Some(end.0), through_hash: Some(hex(&end.1)) })
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
