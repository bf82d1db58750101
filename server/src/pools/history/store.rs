//! The pool history's SQL (`config_history`, `migrations/0010_config_history.sql`): the
//! recorded configuration versions, and a restore as one transaction with its audit row.

use std::collections::BTreeMap;

use client::pool::PoolName;
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use crate::change::store::lock;
use crate::change::{check_version, Ctx};
use crate::error::ChangeError;
use crate::inputs::*;
use crate::pools::store::{compile_pool, put_pool_tx, record_config};
use crate::pools::{parse_pool_body, PoolWritten};

/// One recorded version, for the API, from a row with the columns `config_version`,
/// `created_at`, `actor`, `action` and `body` (pools', plans' and tenants' histories).
pub(crate) fn version_row(r: &sqlx::postgres::PgRow) -> Result<api::pools::PoolVersion, sqlx::Error> {
    Ok(api::pools::PoolVersion {
        version: r.try_get("config_version")?,
        at: crate::inputs::rfc3339(r.try_get("created_at")?),
        actor: r.try_get("actor")?,
        action: r.try_get("action")?,
        snapshot: r.try_get("body")?,
    })
}

/// The pool's current configuration version and its recorded versions, newest first;
/// `None` for an unknown pool.
pub async fn pool_history(db: &PgPool, pool: &PoolName) -> Result<Option<api::pools::PoolHistory>, sqlx::Error> {
    let Some(version) = sqlx::query_scalar::<_, i64>("select config_version from pool where name = $1")
        .bind(pool.as_str())
        .fetch_optional(db)
        .await?
    else {
        return Ok(None);
    };
    let rows = sqlx::query(
        "select config_version, created_at, actor, action, body from config_history
         where entity = $1 order by config_version desc",
    )
    .bind(crate::change::Entity::pool_key(pool))
    .fetch_all(db)
    .await?;
    let versions = rows.iter().map(version_row).collect::<Result<_, _>>()?;
    Ok(Some(api::pools::PoolHistory { version, versions }))
}

/// Makes a new configuration version of `pool` equal to its recorded version `version`
/// (made against the configuration version `expected_version`), audited and published as
/// any other change. Refused, changing nothing: see [`restored`]. Answers what was written
/// and the versions undone.
pub async fn restore_pool(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    version: i64,
    expected_version: i64,
) -> Result<(PoolWritten, Vec<api::pools::PoolVersion>), ChangeError> {
    let mut tx = db.begin().await?;
    let entity = crate::change::Entity::pool_key(pool);
    lock(&mut tx, &entity).await?;
    let (current, current_body) = compile_pool(&mut tx, pool.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())))?;
    check_version(&entity, Some(expected_version), current)?;
    crate::gate::refuse_direct_write(&mut *tx, pool).await?;
    let (body, undoes) = restored(&mut tx, pool, version, current, &current_body).await?;
    let written = put_pool_tx(&mut tx, ctx, pool.as_str(), "pool.restore_version", &body, Some(current)).await?;
    tx.commit().await?;
    Ok((written, undoes))
}

/// The configured body a restore of `pool` (now at configuration version `current`, with
/// body `current_body`) to its recorded version `version` writes, and the versions it
/// undoes, oldest first. Refused: an unknown version (404), the current version (422), a
/// version naming a channel that is no longer registered or is disabled (422, field
/// `version`). The pool's own ejections are operations, not configuration: the members
/// ejected now stay ejected (those of version N that are not ejected now are not ejected
/// again). The caller holds the pool's lock.
pub(crate) async fn restored(
    tx: &mut PgConnection,
    pool: &PoolName,
    version: i64,
    current: i64,
    current_body: &Value,
) -> Result<(Value, Vec<api::pools::PoolVersion>), ChangeError> {
    let entity = crate::change::Entity::pool_key(pool);
    if version < 1 {
        return Err(ChangeError::Malformed {
            field: "version".into(),
            rule: "must be a configuration version (1 or more)".into(),
        });
    }
    if version == current {
        return Err(invalid("version", format!("{version} is the pool's current configuration version")));
    }
    let body: Option<Value> =
        sqlx::query_scalar("select body from config_history where entity = $1 and config_version = $2")
            .bind(&entity)
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?;
    let mut body = body.ok_or_else(|| {
        ChangeError::NotFound(format!("pool {:?} has no recorded configuration version {version}", pool.as_str()))
    })?;
    let snapshot = parse_pool_body(&body)?;
    let channels = snapshot.channels();
    let ejected_now: Vec<String> =
        parse_pool_body(current_body)?.ejected.into_iter().filter(|m| channels.index_of(m).is_some()).collect();
    match body.as_object_mut() {
        Some(object) if ejected_now.is_empty() => {
            object.remove("ejected");
        }
        Some(object) => {
            object.insert("ejected".into(), json!(ejected_now));
        }
        None => {}
    }
    let codes: Vec<&str> = channels.members().iter().map(String::as_str).collect();
    let known: BTreeMap<String, bool> = sqlx::query_as("select code, enabled from channel where code = any($1)")
        .bind(&codes)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    for code in codes {
        match known.get(code) {
            None => {
                return Err(invalid(
                    "version",
                    format!("version {version} names channel {code:?}, which is no longer registered"),
                ))
            }
            Some(false) => {
                return Err(invalid(
                    "version",
                    format!("version {version} names channel {code:?}, which is disabled: enable it first"),
                ))
            }
            Some(true) => {}
        }
    }
    // The version being replaced is in the history before the restore reads what it undoes.
    record_config(&mut *tx, pool.as_str(), None).await?;
    let undoes = versions_after(tx, pool, version).await?;
    Ok((body, undoes))
}

/// The recorded configuration versions of `pool` after `version`, oldest first: what
/// changed since.
pub(crate) async fn versions_after(
    tx: &mut PgConnection,
    pool: &PoolName,
    version: i64,
) -> Result<Vec<api::pools::PoolVersion>, sqlx::Error> {
    let rows = sqlx::query(
        "select config_version, created_at, actor, action, body from config_history
         where entity = $1 and config_version > $2 order by config_version",
    )
    .bind(crate::change::Entity::pool_key(pool))
    .bind(version)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter().map(version_row).collect()
}
