//! The pool tables (`migrations/0003_config.sql`): every write is one transaction (design.md
//! §5) with its audit rows and, for the pool it touches, the snapshot compiled from the rows
//! plus an outbox row. A snapshot is always exactly what the tables say: disabling a
//! channel republishes every pool that holds it, with the channel ejected.

use std::collections::BTreeMap;

use client::pool::{PoolName, PoolSnapshot};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::*;
use crate::change::store::{lock, publish};
use crate::change::{check_version, Ctx, Written};
use crate::error::ChangeError;
use crate::inputs::*;

/// The name of every pool the jobs keep: those of the configuration tables and those
/// only published (a snapshot that could not be adopted into the tables is still drawn,
/// refilled and rotated), in order.
pub async fn pool_names(db: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select name from pool
         union select substr(entity, 6) from snapshot where left(entity, 5) = 'pool:' group by entity order by 1",
    )
    .fetch_all(db)
    .await
}

/// Every pool, by name.
pub async fn list_pools(db: &PgPool) -> Result<Vec<PoolSummary>, sqlx::Error> {
    let rows = sqlx::query(
        "select p.name, p.kind, p.config_version, p.version as published_version, p.timezone, p.updated_at,
                count(m.channel) as members,
                count(m.channel) filter (where m.ejected or not c.enabled) as ejected
         from pool p
         left join pool_member m on m.pool = p.name
         left join channel c on c.code = m.channel
         group by p.name order by p.name",
    )
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(PoolSummary {
                name: r.try_get("name")?,
                kind: r.try_get("kind")?,
                version: r.try_get("config_version")?,
                published_version: r.try_get("published_version")?,
                members: r.try_get("members")?,
                ejected: r.try_get("ejected")?,
                timezone: r.try_get("timezone")?,
                updated_at: crate::inputs::rfc3339(r.try_get("updated_at")?),
            })
        })
        .collect()
}

/// The newest snapshot a pool published (what Redis has or is about to have), parsed.
pub async fn get_published_pool(db: &PgPool, pool: &PoolName) -> Result<Option<PoolSnapshot>, ChangeError> {
    let row: Option<(i64, Value)> =
        sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
            .bind(crate::change::Entity::pool_key(pool))
            .fetch_optional(db)
            .await?;
    let Some((version, body)) = row else { return Ok(None) };
    let mut snapshot = parse_pool_body(&body)?;
    snapshot.version = version as u64;
    Ok(Some(snapshot))
}

/// A pool's configuration version (what `expected_version` is checked against) and its
/// configured body (a snapshot without `version`, health not applied), from its rows.
pub async fn get_pool(db: &PgPool, pool: &PoolName) -> Result<Option<(i64, Value)>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    compile_pool(&mut conn, pool.as_str()).await
}

/// Compiles a pool's configured body from its rows, with its configuration version; `None`
/// when there is no such pool.
pub(crate) async fn compile_pool(tx: &mut PgConnection, pool: &str) -> Result<Option<(i64, Value)>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "select kind, batch_size, low_water, ordering, timezone, eject_rebuild_percent, config_version,
                window_minutes, draw_log
         from pool where name = $1",
    )
    .bind(pool)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let kind: String = row.try_get("kind")?;
    let version: i64 = row.try_get("config_version")?;
    let members = sqlx::query(
        "select m.channel, m.tier, m.weight, m.daily_cap, m.window_cap, m.ejected
         from pool_member m where m.pool = $1 order by m.position",
    )
    .bind(pool)
    .fetch_all(&mut *tx)
    .await?;
    let mut caps = serde_json::Map::new();
    let mut window_caps = serde_json::Map::new();
    let mut ejected = std::collections::BTreeSet::new();
    let mut channel_weights = Vec::new();
    let mut tiers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for m in &members {
        let channel: String = m.try_get("channel")?;
        let weight = json!({"member": channel, "weight": m.try_get::<i64, _>("weight")?});
        match m.try_get::<Option<String>, _>("tier")? {
            Some(tier) => tiers.entry(tier).or_default().push(weight),
            None => channel_weights.push(weight),
        }
        if let Some(cap) = m.try_get::<Option<i64>, _>("daily_cap")? {
            caps.insert(channel.clone(), json!(cap));
        }
        if let Some(cap) = m.try_get::<Option<i64>, _>("window_cap")? {
            window_caps.insert(channel.clone(), json!(cap));
        }
        // The pool's own ejections; disabled channels and health are applied on publishing.
        if m.try_get::<bool, _>("ejected")? {
            ejected.insert(channel);
        }
    }
    let weights = if kind == "tiers" {
        let rows = sqlx::query("select tier, weight from pool_tier where pool = $1 order by position")
            .bind(pool)
            .fetch_all(&mut *tx)
            .await?;
        rows.iter()
            .map(|r| Ok(json!({"member": r.try_get::<String, _>("tier")?, "weight": r.try_get::<i64, _>("weight")?})))
            .collect::<Result<Vec<_>, sqlx::Error>>()?
    } else {
        channel_weights
    };
    let peaks =
        sqlx::query("select start_at, end_at, multiplier, weights from peak_window where pool = $1 order by position")
            .bind(pool)
            .fetch_all(&mut *tx)
            .await?;
    let peak_windows = peaks
        .iter()
        .map(|r| {
            let mut window = json!({
                "start": r.try_get::<String, _>("start_at")?,
                "end": r.try_get::<String, _>("end_at")?,
                "multiplier": r.try_get::<i32, _>("multiplier")?,
            });
            if let Some(weights) = r.try_get::<Option<Value>, _>("weights")? {
                window["weights"] = weights;
            }
            Ok(window)
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let mut body = json!({
        "kind": kind,
        "ordering": row.try_get::<String, _>("ordering")?,
        "batch_size": row.try_get::<i32, _>("batch_size")?,
        "low_water": row.try_get::<i32, _>("low_water")?,
        "timezone": row.try_get::<String, _>("timezone")?,
        "eject_rebuild_percent": row.try_get::<i16, _>("eject_rebuild_percent")?,
        "weights": weights,
        "peak_windows": peak_windows,
        "caps": caps,
    });
    if kind == "tiers" {
        body["tiers"] = json!(tiers);
    }
    if !ejected.is_empty() {
        body["ejected"] = json!(ejected);
    }
    if let Some(minutes) = row.try_get::<Option<i32>, _>("window_minutes")?.filter(|_| !window_caps.is_empty()) {
        body["window_caps"] = json!({"minutes": minutes, "caps": window_caps});
    }
    if !row.try_get::<bool, _>("draw_log")? {
        body["draw_log"] = json!(false);
    }
    Ok(Some((version, body)))
}

/// Who made a configuration version, and by which action, for the pool's history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MadeBy<'a> {
    pub actor: &'a str,
    pub action: &'a str,
}

/// Records the pool's configuration at its current configuration version in its history;
/// a version already recorded is kept as it is.
pub(crate) async fn record_config(
    tx: &mut PgConnection,
    pool: &str,
    made_by: Option<MadeBy<'_>>,
) -> Result<(), sqlx::Error> {
    let Some((version, body)) = compile_pool(tx, pool).await? else {
        return Ok(());
    };
    sqlx::query(
        "insert into config_history (entity, config_version, body, actor, action) values ($1, $2, $3, $4, $5)
         on conflict (entity, config_version) do nothing",
    )
    .bind(crate::change::Entity::pool_key(pool))
    .bind(version)
    .bind(body)
    .bind(made_by.map(|m| m.actor))
    .bind(made_by.map(|m| m.action))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Replaces a pool's rows with what `snapshot` says, and records the new configuration
/// version in the pool's history (with the version it replaces, when the history does not
/// hold that one yet). Every member must be a registered channel, and a channel with a
/// tier serves only in that tier.
pub(crate) async fn store_pool(
    tx: &mut PgConnection,
    pool: &str,
    snapshot: &PoolSnapshot,
    version: i64,
    made_by: MadeBy<'_>,
) -> Result<(), ChangeError> {
    record_config(tx, pool, None).await?;
    let tiers_kind = matches!(snapshot.kind, client::pool::PoolKind::Tiers);
    // (channel, tier within a tiers pool, weight)
    let mut members: Vec<(String, Option<String>, u64)> = Vec::new();
    if tiers_kind {
        for (tier, channels) in &snapshot.tiers {
            for (channel, weight) in channels.iter() {
                members.push((channel.to_owned(), Some(tier.as_str().to_owned()), weight));
            }
        }
    } else {
        for (channel, weight) in snapshot.weights.iter() {
            members.push((channel.to_owned(), None, weight));
        }
    }
    let codes: Vec<String> = members.iter().map(|(c, _, _)| c.clone()).collect();
    let known: Vec<(String, Option<String>)> =
        sqlx::query_as("select code, tier from channel where code = any($1)").bind(&codes).fetch_all(&mut *tx).await?;
    let known: BTreeMap<String, Option<String>> = known.into_iter().collect();
    for (channel, tier, _) in &members {
        let field = if tier.is_some() { "tiers" } else { "weights" };
        match known.get(channel) {
            None => {
                return Err(invalid(
                    field,
                    format!("unknown channel {channel:?}: register it first (POST /api/v1/channels)"),
                ))
            }
            Some(Some(own)) if tier.as_ref().is_some_and(|t| t != own) => {
                return Err(invalid(
                    field,
                    format!("channel {channel:?} serves tier {own}, not tier {}", tier.as_deref().unwrap_or("")),
                ))
            }
            Some(_) => {}
        }
    }
    sqlx::query(
        "insert into pool (name, kind, batch_size, low_water, ordering, timezone, eject_rebuild_percent, version,
             config_version, updated_at, window_minutes, draw_log)
         values ($1, $2, $3, $4, $5, $6, $7, $8, 1, now(), $9, $10)
         on conflict (name) do update set kind = excluded.kind, batch_size = excluded.batch_size,
             low_water = excluded.low_water, ordering = excluded.ordering, timezone = excluded.timezone,
             eject_rebuild_percent = excluded.eject_rebuild_percent, config_version = pool.config_version + 1,
             updated_at = now(), window_minutes = excluded.window_minutes, draw_log = excluded.draw_log",
    )
    .bind(pool)
    .bind(if tiers_kind { "tiers" } else { "channels" })
    .bind(snapshot.batch_size as i32)
    .bind(snapshot.low_water as i32)
    .bind(ordering_name(snapshot))
    .bind(&snapshot.timezone)
    .bind(i16::from(snapshot.eject_rebuild_percent))
    .bind(version)
    .bind(snapshot.window_caps.as_ref().map(|w| w.minutes as i32))
    .bind(snapshot.draw_log)
    .execute(&mut *tx)
    .await?;
    for table in ["pool_member", "pool_tier", "peak_window"] {
        sqlx::query(&format!("delete from {table} where pool = $1")).bind(pool).execute(&mut *tx).await?;
    }
    if tiers_kind {
        for (position, (tier, weight)) in snapshot.weights.iter().enumerate() {
            sqlx::query("insert into pool_tier (pool, tier, position, weight) values ($1, $2, $3, $4)")
                .bind(pool)
                .bind(tier)
                .bind(position as i32)
                .bind(weight as i64)
                .execute(&mut *tx)
                .await?;
        }
    }
    for (position, (channel, tier, weight)) in members.iter().enumerate() {
        sqlx::query(
            "insert into pool_member (pool, channel, tier, position, weight, daily_cap, ejected, window_cap)
             values ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(pool)
        .bind(channel)
        .bind(tier)
        .bind(position as i32)
        .bind(*weight as i64)
        .bind(snapshot.caps.get(channel).map(|c| *c as i64))
        .bind(snapshot.ejected.contains(channel))
        .bind(snapshot.window_caps.as_ref().and_then(|w| w.caps.get(channel)).map(|c| *c as i64))
        .execute(&mut *tx)
        .await?;
    }
    for (position, window) in snapshot.peak_windows.iter().enumerate() {
        let raw = serde_json::to_value(window).map_err(|e| invalid("peak_windows", e.to_string()))?;
        sqlx::query(
            "insert into peak_window (pool, position, start_at, end_at, multiplier, weights)
             values ($1, $2, $3, $4, $5, $6)",
        )
        .bind(pool)
        .bind(position as i32)
        .bind(raw["start"].as_str().unwrap_or_default())
        .bind(raw["end"].as_str().unwrap_or_default())
        .bind(raw["multiplier"].as_i64().unwrap_or(1) as i32)
        .bind(raw.get("weights").filter(|w| !w.is_null()))
        .execute(&mut *tx)
        .await?;
    }
    record_config(tx, pool, Some(made_by)).await?;
    Ok(())
}

/// What a pool publishes: its configured body with health applied. A member health has
/// ejected (or an operator pinned ejected) joins the ejected set; a member health has
/// decayed gets base weight × factor, rounded, at least 1; a member pinned healthy keeps
/// its base weight.
pub(crate) async fn effective_body(tx: &mut PgConnection, pool: &str, mut body: Value) -> Result<Value, sqlx::Error> {
    let rows = sqlx::query(
        "select m.channel, m.tier, c.enabled, h.state, h.factor, p.state as pin
         from pool_member m
         join channel c on c.code = m.channel
         left join member_health h on h.pool = m.pool and h.channel = m.channel
         left join channel_pin p on p.channel = m.channel
         where m.pool = $1",
    )
    .bind(pool)
    .fetch_all(&mut *tx)
    .await?;
    let mut ejected: std::collections::BTreeSet<String> =
        serde_json::from_value(body.get("ejected").cloned().unwrap_or(json!([]))).unwrap_or_default();
    for r in &rows {
        let channel: String = r.try_get("channel")?;
        let tier: Option<String> = r.try_get("tier")?;
        let pin: Option<String> = r.try_get("pin")?;
        let state: Option<String> = r.try_get("state")?;
        let factor: f64 = match pin.as_deref() {
            Some("healthy") => 1.0,
            _ => r.try_get::<Option<f64>, _>("factor")?.unwrap_or(1.0),
        };
        // A channel disabled everywhere is ejected from every pool that holds it.
        let disabled = !r.try_get::<bool, _>("enabled")?;
        if disabled || pin.as_deref() == Some("ejected") || (pin.is_none() && state.as_deref() == Some("ejected")) {
            ejected.insert(channel.clone());
        }
        if factor < 1.0 {
            let scale = |list: Option<&mut Value>| {
                if let Some(Value::Array(members)) = list {
                    for m in members.iter_mut().filter(|m| m["member"] == json!(channel)) {
                        let base = m["weight"].as_u64().unwrap_or(0);
                        m["weight"] = json!(engine::health::effective_weight(base, factor, false));
                    }
                }
            };
            match &tier {
                Some(tier) => scale(body.get_mut("tiers").and_then(|t| t.get_mut(tier))),
                None => {
                    scale(body.get_mut("weights"));
                    // Peak windows' override weights too: a decayed channel stays decayed at peak.
                    if let Some(Value::Array(windows)) = body.get_mut("peak_windows") {
                        for window in windows.iter_mut() {
                            scale(window.get_mut("weights"));
                        }
                    }
                }
            }
        }
    }
    if !ejected.is_empty() {
        body["ejected"] = json!(ejected);
    }
    Ok(body)
}

/// Compiles a pool from its rows (health applied) and publishes it as its next version.
pub(crate) async fn republish_pool(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &str,
    action: &str,
) -> Result<Written, ChangeError> {
    republish_pool_body(tx, ctx, pool, action).await.map(|(written, _)| written)
}

/// [`republish_pool`], also answering the published snapshot.
pub(crate) async fn republish_pool_body(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &str,
    action: &str,
) -> Result<(Written, PoolSnapshot), ChangeError> {
    let (_, base) =
        compile_pool(tx, pool).await?.ok_or_else(|| ChangeError::NotFound(format!("unknown pool {pool:?}")))?;
    let body = effective_body(tx, pool, base).await?;
    let entity = crate::change::Entity::pool_key(pool);
    let written = publish(tx, ctx, &entity, action, &body).await?;
    let mut published = parse_pool_body(&body)?;
    published.version = written.version as u64;
    sqlx::query("update pool set version = $2, updated_at = now() where name = $1")
        .bind(pool)
        .bind(written.version)
        .execute(&mut *tx)
        .await?;
    Ok((written, published))
}

/// Like [`republish_pool`], but only when what the pool publishes differs from its newest
/// snapshot (a health change that rounds to the same weights writes nothing).
pub(crate) async fn republish_pool_if_changed(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &str,
    action: &str,
) -> Result<Option<Written>, ChangeError> {
    let Some((_, base)) = compile_pool(tx, pool).await? else {
        return Ok(None);
    };
    let body = effective_body(tx, pool, base).await?;
    let latest: Option<Value> =
        sqlx::query_scalar("select body from snapshot where entity = $1 order by version desc limit 1")
            .bind(crate::change::Entity::pool_key(pool))
            .fetch_optional(&mut *tx)
            .await?;
    if latest.as_ref() == Some(&body) {
        return Ok(None);
    }
    republish_pool(tx, ctx, pool, action).await.map(Some)
}

/// Creates (`expected_version` 0) or replaces a pool with `body`, in the caller's
/// transaction: rows, snapshot, audit row, outbox row. `expected_version` is checked
/// against the pool's configuration version.
pub async fn put_pool_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &str,
    action: &str,
    body: &Value,
    expected_version: Option<i64>,
) -> Result<PoolWritten, ChangeError> {
    PoolName::parse(pool).map_err(from_input)?;
    let snapshot = parse_pool_body(body)?;
    let entity = crate::change::Entity::pool_key(pool);
    lock(tx, &entity).await?;
    let current: Option<(i64, i64)> = sqlx::query_as("select config_version, version from pool where name = $1")
        .bind(pool)
        .fetch_optional(&mut *tx)
        .await?;
    check_version(&entity, expected_version, current.map_or(0, |c| c.0))?;
    store_pool(tx, pool, &snapshot, current.map_or(1, |c| c.1), MadeBy { actor: ctx.actor, action }).await?;
    let (written, published) = republish_pool_body(tx, ctx, pool, action).await?;
    Ok(PoolWritten { written, config_version: current.map_or(1, |c| c.0 + 1), published })
}

/// Creates or replaces a pool (see [`put_pool_tx`]).
pub async fn put_pool(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    body: &Value,
    expected_version: i64,
) -> Result<PoolWritten, ChangeError> {
    parse_pool_body(body)?.check_peak_batches().map_err(from_input)?;
    let mut tx = db.begin().await?;
    lock(&mut tx, &crate::change::Entity::pool_key(pool)).await?;
    // Creating a pool is not refused; replacing one under an approval policy is.
    if expected_version != 0 {
        crate::gate::refuse_direct_write(&mut *tx, pool).await?;
    }
    let written = put_pool_tx(&mut tx, ctx, pool.as_str(), "pool.put", body, Some(expected_version)).await?;
    tx.commit().await?;
    Ok(written)
}

/// Changes a pool through `edit` on its configured body (made against the configuration
/// version `expected_version` when given) and publishes the result; 404 for an unknown
/// pool. `edit` sees the configuration, never the health-adjusted weights.
pub async fn modify_pool(
    db: &PgPool,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    action: &str,
    expected_version: Option<i64>,
    edit: impl FnOnce(&mut PoolSnapshot) -> Result<(), ChangeError>,
) -> Result<PoolWritten, ChangeError> {
    let mut tx = db.begin().await?;
    lock(&mut tx, &crate::change::Entity::pool_key(pool)).await?;
    // Under an approval policy only what reduces risk (a member ejected or back) is direct.
    if !matches!(action, "pool.eject" | "pool.restore") {
        crate::gate::refuse_direct_write(&mut *tx, pool).await?;
    }
    let written = modify_pool_tx(&mut tx, ctx, pool, action, expected_version, edit).await?;
    tx.commit().await?;
    Ok(written)
}

/// [`modify_pool`] in the caller's transaction (which commits it).
pub(crate) async fn modify_pool_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &PoolName,
    action: &str,
    expected_version: Option<i64>,
    edit: impl FnOnce(&mut PoolSnapshot) -> Result<(), ChangeError>,
) -> Result<PoolWritten, ChangeError> {
    let entity = crate::change::Entity::pool_key(pool);
    lock(&mut *tx, &entity).await?;
    let (config_version, body) = compile_pool(&mut *tx, pool.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())))?;
    check_version(&entity, expected_version, config_version)?;
    let mut snapshot = parse_pool_body(&body)?;
    edit(&mut snapshot)?;
    snapshot.version = 1;
    snapshot.validate().map_err(from_input)?;
    store_pool(&mut *tx, pool.as_str(), &snapshot, 1, MadeBy { actor: ctx.actor, action }).await?;
    let (written, published) = republish_pool_body(&mut *tx, ctx, pool.as_str(), action).await?;
    // Ejecting and restoring a member stay immediate under an approval policy: flagged.
    if matches!(action, "pool.eject" | "pool.restore") {
        crate::gate::break_glass::store::flag(&mut *tx, ctx, pool, action, written.audit_id).await?;
    }
    Ok(PoolWritten { written, config_version: config_version + 1, published })
}

/// Enables or disables a channel everywhere: every pool that holds it is republished with
/// the channel ejected (disabled) or drawn again (enabled), in the same transaction.
/// Returns the channel's change first, then each pool's.
pub async fn set_channel_enabled(
    db: &PgPool,
    ctx: &Ctx<'_>,
    code: &crate::channels::ChannelCode,
    enabled: bool,
    expected_version: Option<i64>,
) -> Result<(Vec<Written>, api::channels::Channel), ChangeError> {
    let mut tx = db.begin().await?;
    let (channel, after) =
        crate::channels::store::set_enabled_tx(&mut tx, ctx, code, enabled, expected_version).await?;
    let (action, audit_id) = (channel.action.clone(), channel.audit_id);
    let mut written = vec![channel];
    // Pools in name order, so two such changes never wait on each other in a circle.
    for pool in &after.pools {
        lock(&mut tx, &crate::change::Entity::pool_key(pool)).await?;
        let pool_action = if enabled { "pool.channel_enabled" } else { "pool.channel_disabled" };
        written.push(republish_pool(&mut tx, ctx, pool, pool_action).await?);
        // Immediate on a pool under an approval policy too: flagged for an auditor.
        if let Ok(name) = PoolName::parse(pool) {
            crate::gate::break_glass::store::flag(&mut tx, ctx, &name, &action, audit_id).await?;
        }
    }
    tx.commit().await?;
    Ok((written, after))
}
