//! The channel table; a change to a channel republishes every pool that holds it.

use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::*;
use crate::change::store::{audit, lock};
use crate::change::{check_version, Ctx, Written};
use crate::error::ChangeError;
use crate::inputs::*;

// ---------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------

pub(crate) const CHANNEL_COLUMNS: &str =
    "c.code, c.name, c.tier, c.enabled, c.base_weight, c.version, c.created_at, c.updated_at,
     coalesce((select array_agg(m.pool order by m.pool) from pool_member m where m.channel = c.code), '{}') as pools";

pub(crate) fn channel_row(r: &sqlx::postgres::PgRow) -> Result<Channel, sqlx::Error> {
    Ok(Channel {
        code: r.try_get("code")?,
        name: r.try_get("name")?,
        tier: r.try_get("tier")?,
        enabled: r.try_get("enabled")?,
        base_weight: r.try_get("base_weight")?,
        version: r.try_get("version")?,
        created_at: crate::inputs::rfc3339(r.try_get("created_at")?),
        updated_at: crate::inputs::rfc3339(r.try_get("updated_at")?),
        pools: r.try_get("pools")?,
    })
}

pub(crate) fn channel_json(c: &Channel) -> Value {
    json!({"code": c.code, "name": c.name, "tier": c.tier, "enabled": c.enabled, "base_weight": c.base_weight, "version": c.version})
}

/// Every channel, by code.
pub async fn list_channels(db: &PgPool) -> Result<Vec<Channel>, sqlx::Error> {
    let rows = sqlx::query(&format!("select {CHANNEL_COLUMNS} from channel c order by c.code")).fetch_all(db).await?;
    rows.iter().map(channel_row).collect()
}

pub(crate) async fn channel_in(tx: &mut PgConnection, code: &str) -> Result<Option<Channel>, sqlx::Error> {
    let row = sqlx::query(&format!("select {CHANNEL_COLUMNS} from channel c where c.code = $1"))
        .bind(code)
        .fetch_optional(tx)
        .await?;
    row.as_ref().map(channel_row).transpose()
}

/// One channel, with the pools that hold it.
pub async fn get_channel(db: &PgPool, code: &ChannelCode) -> Result<Option<Channel>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    channel_in(&mut conn, code.as_str()).await
}

/// Registers a channel; 409 when the code is taken.
pub async fn create_channel(
    db: &PgPool,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    spec: &ChannelSpec,
    enabled: bool,
) -> Result<(Written, Channel), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "channels").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "channels").await?;
    let done = create_channel_tx(&mut tx, ctx, code, spec, enabled).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`create_channel`] in the caller's transaction (which holds the configuration lock or takes
/// it here), without the approval policy's check: what an approved change request applies.
pub(crate) async fn create_channel_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    spec: &ChannelSpec,
    enabled: bool,
) -> Result<(Written, Channel), ChangeError> {
    let entity = format!("channel:{code}");
    lock(&mut *tx, &entity).await?;
    if channel_in(&mut *tx, code.as_str()).await?.is_some() {
        return Err(ChangeError::Duplicate {
            field: "code".into(),
            rule: format!("channel {:?} exists", code.as_str()),
        });
    }
    sqlx::query("insert into channel (code, name, tier, enabled, base_weight) values ($1, $2, $3, $4, $5)")
        .bind(code.as_str())
        .bind(spec.name.as_str())
        .bind(spec.tier.map(|t| t.as_str().to_owned()))
        .bind(enabled)
        .bind(spec.base_weight.get() as i64)
        .execute(&mut *tx)
        .await?;
    let channel = channel_in(&mut *tx, code.as_str()).await?.expect("just inserted");
    let audit_id = audit(&mut *tx, ctx, &entity, "channel.create", None, Some(&channel_json(&channel))).await?;
    Ok((Written { entity, action: "channel.create".into(), version: 1, audit_id, outbox_id: None }, channel))
}

/// Changes a channel's name, tier and base weight. A tier change is refused while the
/// channel serves another tier in a pool.
pub async fn update_channel(
    db: &PgPool,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    spec: &ChannelSpec,
    expected_version: i64,
) -> Result<(Written, Channel), ChangeError> {
    let mut tx = db.begin().await?;
    crate::change::store::lock(&mut tx, "channels").await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, "channels").await?;
    let done = update_channel_tx(&mut tx, ctx, code, spec, expected_version).await?;
    tx.commit().await?;
    Ok(done)
}

/// [`update_channel`] in the caller's transaction (which holds the configuration lock or takes
/// it here), without the approval policy's check: what an approved change request applies.
pub(crate) async fn update_channel_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    spec: &ChannelSpec,
    expected_version: i64,
) -> Result<(Written, Channel), ChangeError> {
    let entity = format!("channel:{code}");
    lock(&mut *tx, &entity).await?;
    let before = channel_in(&mut *tx, code.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown channel {:?}", code.as_str())))?;
    check_version(&entity, Some(expected_version), before.version)?;
    if let Some(tier) = spec.tier {
        let elsewhere: Option<String> = sqlx::query_scalar(
            "select pool from pool_member where channel = $1 and tier is not null and tier <> $2 order by pool limit 1",
        )
        .bind(code.as_str())
        .bind(tier.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(pool) = elsewhere {
            return Err(invalid(
                "tier",
                format!("the channel serves another tier in pool {pool:?}; move it there first"),
            ));
        }
    }
    sqlx::query("update channel set name = $2, tier = $3, base_weight = $4, version = version + 1, updated_at = now() where code = $1")
        .bind(code.as_str())
        .bind(spec.name.as_str())
        .bind(spec.tier.map(|t| t.as_str().to_owned()))
        .bind(spec.base_weight.get() as i64)
        .execute(&mut *tx)
        .await?;
    let after = channel_in(&mut *tx, code.as_str()).await?.expect("exists");
    let audit_id =
        audit(&mut *tx, ctx, &entity, "channel.update", Some(&channel_json(&before)), Some(&channel_json(&after)))
            .await?;
    Ok((Written { entity, action: "channel.update".into(), version: after.version, audit_id, outbox_id: None }, after))
}

/// Enables or disables a channel, in the caller's transaction: its row, its audit row and,
/// under a policy on channels, a break-glass flag. The pools that hold it are republished
/// by `pools::store::set_channel_enabled`, in the same transaction.
pub(crate) async fn set_enabled_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    enabled: bool,
    expected_version: Option<i64>,
) -> Result<(Written, Channel), ChangeError> {
    let entity = format!("channel:{code}");
    let action = if enabled { "channel.enable" } else { "channel.disable" };
    lock(&mut *tx, &entity).await?;
    let before = channel_in(&mut *tx, code.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown channel {:?}", code.as_str())))?;
    check_version(&entity, expected_version, before.version)?;
    if before.enabled == enabled {
        let word = if enabled { "enabled" } else { "disabled" };
        return Err(invalid("enabled", format!("channel {:?} is already {word}", code.as_str())));
    }
    sqlx::query("update channel set enabled = $2, version = version + 1, updated_at = now() where code = $1")
        .bind(code.as_str())
        .bind(enabled)
        .execute(&mut *tx)
        .await?;
    let after = channel_in(&mut *tx, code.as_str()).await?.expect("exists");
    let audit_id =
        audit(&mut *tx, ctx, &entity, action, Some(&channel_json(&before)), Some(&channel_json(&after))).await?;
    // Immediate under a policy on channels too: flagged for an auditor.
    crate::gate::break_glass::store::flag_scope(&mut *tx, ctx, &entity, action, "channels", audit_id).await?;
    Ok((Written { entity, action: action.into(), version: after.version, audit_id, outbox_id: None }, after))
}

/// Whether a channel exists.
pub async fn exists(db: &PgPool, code: &str) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query_scalar::<_, i32>("select 1 from channel where code = $1")
        .bind(code)
        .fetch_optional(db)
        .await?
        .is_some())
}
