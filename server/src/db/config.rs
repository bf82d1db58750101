//! The configuration store: channels, pools (members, tiers, peak windows, caps), plans,
//! tenants and grants as tables (`migrations/0003_config.sql`).
//!
//! Every write is one transaction (DESIGN §5): the rows, an audit row for each entity it
//! changes, and, for each published entity it touches (a pool, a tenant), the snapshot
//! compiled from the rows plus an outbox row. Published entities are compiled from the
//! rows, so a snapshot is always exactly what the tables say: disabling a channel, for
//! instance, republishes every pool that holds it with the channel ejected.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use client::pool::{PoolName, PoolSnapshot};
use client::quota::{FallbackPolicy, Grant, GrantId, GrantKind, InvalidInput, TenantId, TokenCount, Tokens};
use engine::Tier;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use super::audit::{insert_audit, NewAudit, Source};
use super::change::{validate_body, ChangeError};

/// Who makes a change, from where, and why: shared by every row the change writes.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub actor: &'a str,
    pub source: Source,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

/// One entity a change wrote: its new version, its audit row and, when it is published,
/// its outbox row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Written {
    pub entity: String,
    pub action: String,
    pub version: i64,
    pub audit_id: i64,
    /// The outbox row of a published entity (pools, tenants); `None` for the others.
    pub outbox_id: Option<i64>,
}

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ChangeError {
    ChangeError::Invalid { field: field.into(), rule: rule.into() }
}

fn from_input(e: InvalidInput) -> ChangeError {
    ChangeError::Invalid { field: e.field, rule: e.rule }
}

/// Makes the transaction the one writer of configuration until it commits. One lock for
/// every entity: a change reads the rows it depends on (channels, plans) only after taking
/// it, so no two changes interleave, and no two wait on each other in a circle (the audit
/// trail's own lock, taken by its insert trigger, always comes after this one). Admin and
/// health changes are rare enough that one writer at a time costs nothing. `entity` names
/// what the change is about, for the log.
pub(crate) async fn lock(tx: &mut PgConnection, entity: &str) -> Result<(), sqlx::Error> {
    tracing::trace!(entity, "taking the configuration lock");
    sqlx::query("select pg_advisory_xact_lock(hashtext('tessera.config'))").execute(tx).await?;
    Ok(())
}

fn check_version(entity: &str, expected: Option<i64>, current: i64) -> Result<(), ChangeError> {
    match expected {
        Some(expected) if expected != current => {
            Err(ChangeError::Conflict { entity: entity.to_owned(), expected, current })
        }
        _ => Ok(()),
    }
}

pub(crate) async fn audit(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<i64, sqlx::Error> {
    let row = insert_audit(
        tx,
        &NewAudit {
            actor: ctx.actor,
            source: ctx.source,
            action,
            entity,
            before,
            after,
            reason: ctx.reason,
            request_id: ctx.request_id,
        },
    )
    .await?;
    Ok(row.id)
}

/// Writes `body` as the next snapshot of a published entity, with its audit row (the
/// previous snapshot as `before`) and its outbox row.
async fn publish(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    entity: &str,
    action: &str,
    body: &Value,
) -> Result<Written, ChangeError> {
    validate_body(entity, body)?;
    let before: Option<Value> =
        sqlx::query_scalar("select body from snapshot where entity = $1 order by version desc limit 1")
            .bind(entity)
            .fetch_optional(&mut *tx)
            .await?;
    let version = super::snapshot::insert_next(&mut *tx, entity, body).await?;
    let audit_id = audit(tx, ctx, entity, action, before.as_ref(), Some(body)).await?;
    let outbox_id: i64 = sqlx::query_scalar("insert into outbox (entity, version) values ($1, $2) returning id")
        .bind(entity)
        .bind(version)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Written { entity: entity.to_owned(), action: action.to_owned(), version, audit_id, outbox_id: Some(outbox_id) })
}

// ---------------------------------------------------------------------------------------
// Validated inputs
// ---------------------------------------------------------------------------------------

fn identifier(field: &str, raw: &str, extra: &str) -> Result<String, ChangeError> {
    if raw.is_empty() || raw.len() > 64 {
        return Err(invalid(field, format!("must be 1..=64 characters, got {}", raw.chars().count())));
    }
    if let Some(bad) =
        raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(*c)))
    {
        return Err(invalid(field, format!("may hold only ASCII letters, digits, '_', '-'{extra}; found {bad:?}")));
    }
    Ok(raw.to_owned())
}

macro_rules! validated_string {
    ($(#[$doc:meta])* $name:ident, $parse:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parses the value, naming the field and the rule when it is refused.
            pub fn parse(raw: &str) -> Result<Self, ChangeError> {
                let parse: fn(&str) -> Result<String, ChangeError> = $parse;
                parse(raw).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

validated_string!(
    /// A channel's code: 1..=64 of `[A-Za-z0-9_.-]` (the name tickets carry).
    ChannelCode, |raw| identifier("code", raw, ".")
);
validated_string!(
    /// A plan's name: 1..=64 of `[A-Za-z0-9_-]`.
    PlanName, |raw| identifier("plan", raw, "")
);
validated_string!(
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    DisplayName,
    |raw| {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(invalid("name", "must not be blank"));
        }
        if trimmed.chars().count() > 200 {
            return Err(invalid("name", format!("must be at most 200 characters, got {}", trimmed.chars().count())));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(invalid("name", "must not hold control characters"));
        }
        Ok(trimmed.to_owned())
    }
);

/// The largest weight or amount Lua holds exactly: 2^53 − 1.
pub const MAX_INTEGER: u64 = (1 << 53) - 1;

/// A weight: an integer in 0..=2^53−1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Weight(u64);

impl Weight {
    pub fn parse(field: &str, value: i128) -> Result<Self, ChangeError> {
        if !(0..=MAX_INTEGER as i128).contains(&value) {
            return Err(invalid(field, format!("must be an integer in 0..={MAX_INTEGER}, got {value}")));
        }
        Ok(Self(value as u64))
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Number::deserialize(d)?;
        let value = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)).ok_or_else(|| {
            serde::de::Error::custom(format!("base_weight: must be an integer in 0..={MAX_INTEGER}, got {value}"))
        })?;
        Self::parse("base_weight", value).map_err(serde::de::Error::custom)
    }
}

/// What a channel is, besides its code and whether it is enabled.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ChannelSpec {
    pub name: DisplayName,
    /// The tier it serves in `tiers` pools (G, N or U), if any.
    #[serde(default)]
    pub tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one.
    pub base_weight: Weight,
}

/// A channel as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Channel {
    pub code: String,
    pub name: String,
    pub tier: Option<String>,
    pub enabled: bool,
    pub base_weight: i64,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The pools that hold it.
    pub pools: Vec<String>,
}

/// A plan's limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "PlanSpecRaw")]
pub struct PlanSpec {
    /// Tokens per UTC calendar month, 0..=2^53−1.
    pub monthly_tokens: TokenCount,
    /// Requests per UTC day, 0..=2^53−1.
    pub daily_requests: TokenCount,
    /// Reservations open at once, 0..=2^31−1.
    pub concurrency: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanSpecRaw {
    monthly_tokens: serde_json::Number,
    daily_requests: serde_json::Number,
    concurrency: serde_json::Number,
}

/// An integer from JSON, or the field's rule.
fn integer(field: &str, n: &serde_json::Number, max: u64) -> Result<u64, String> {
    match n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)) {
        Some(v) if (0..=max as i128).contains(&v) => Ok(v as u64),
        _ => Err(format!("{field}: must be an integer in 0..={max}, got {n}")),
    }
}

impl TryFrom<PlanSpecRaw> for PlanSpec {
    type Error = String;
    fn try_from(raw: PlanSpecRaw) -> Result<Self, String> {
        let count = |field: &str, n: &serde_json::Number| -> Result<TokenCount, String> {
            let v = integer(field, n, MAX_INTEGER)?;
            TokenCount::parse(field, v as i128).map_err(|e| format!("{}: {}", e.field, e.rule))
        };
        Ok(Self {
            monthly_tokens: count("monthly_tokens", &raw.monthly_tokens)?,
            daily_requests: count("daily_requests", &raw.daily_requests)?,
            concurrency: integer("concurrency", &raw.concurrency, i32::MAX as u64)? as u32,
        })
    }
}

/// A plan as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Plan {
    pub name: String,
    pub monthly_tokens: i64,
    pub daily_requests: i64,
    pub concurrency: i32,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Tenants on this plan.
    pub tenants: i64,
}

fn default_ttl_ms() -> i64 {
    600_000
}

fn default_retention() -> i64 {
    62
}

fn default_fallback() -> FallbackPolicy {
    FallbackPolicy::FailClosed
}

/// A tenant's settings: its plan and how its reservations behave.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TenantSpec {
    pub plan: PlanName,
    /// How long a reservation stays open before the sweeper returns it, 1..=86400000 ms.
    #[serde(default = "default_ttl_ms")]
    pub reservation_ttl_ms: i64,
    /// Days a period's counters are kept after it ends, 1..=3660.
    #[serde(default = "default_retention")]
    pub retention_days: i64,
    /// What clients do while Redis is unreachable (default `fail_closed`).
    #[serde(default = "default_fallback")]
    pub fallback: FallbackPolicy,
}

impl TenantSpec {
    fn validate(&self) -> Result<(), ChangeError> {
        if !(1..=86_400_000).contains(&self.reservation_ttl_ms) {
            return Err(invalid("reservation_ttl_ms", "must be in 1..=86400000 (one day)"));
        }
        if !(1..=3660).contains(&self.retention_days) {
            return Err(invalid("retention_days", "must be in 1..=3660"));
        }
        Ok(())
    }
}

/// A grant to add: temporary or bonus tokens, live in `[starts_at, expires_at)`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NewGrant {
    pub id: GrantId,
    #[serde(flatten)]
    pub kind: GrantKind,
    pub amount: Tokens,
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A tenant as stored: settings, plan limits, grants, and its published snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Tenant {
    pub name: String,
    pub plan: String,
    pub reservation_ttl_ms: i64,
    pub retention_days: i32,
    pub fallback: Value,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
    /// Every grant, revoked ones included (with `revoked_at`).
    pub grants: Vec<Value>,
    /// What is published to Redis.
    pub snapshot: Value,
}

// ---------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------

/// A pool in a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolSummary {
    pub name: String,
    pub kind: String,
    /// The configuration version (what `expected_version` is checked against).
    pub version: i64,
    /// The newest published snapshot's version.
    pub published_version: i64,
    pub members: i64,
    pub ejected: i64,
    pub timezone: String,
    pub updated_at: DateTime<Utc>,
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
                updated_at: r.try_get("updated_at")?,
            })
        })
        .collect()
}

/// The newest snapshot a pool published (what Redis has or is about to have), parsed.
pub async fn get_published_pool(db: &PgPool, pool: &PoolName) -> Result<Option<PoolSnapshot>, ChangeError> {
    let row: Option<(i64, Value)> =
        sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
            .bind(format!("pool:{pool}"))
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
async fn compile_pool(tx: &mut PgConnection, pool: &str) -> Result<Option<(i64, Value)>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "select kind, batch_size, low_water, ordering, timezone, eject_rebuild_percent, config_version
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
        "select m.channel, m.tier, m.weight, m.daily_cap, m.ejected
         from pool_member m where m.pool = $1 order by m.position",
    )
    .bind(pool)
    .fetch_all(&mut *tx)
    .await?;
    let mut caps = serde_json::Map::new();
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
    Ok(Some((version, body)))
}

/// Parses a pool body (a snapshot without `version`), naming the field of the first rule
/// it breaks.
pub fn parse_pool_body(body: &Value) -> Result<PoolSnapshot, ChangeError> {
    let mut versioned = body.clone();
    versioned
        .as_object_mut()
        .ok_or_else(|| invalid("snapshot", "must be a JSON object"))?
        .insert("version".to_owned(), json!(1));
    let snapshot: PoolSnapshot = serde_json::from_value(versioned).map_err(|e| pool_field_error(body, e))?;
    snapshot.validate().map_err(from_input)?;
    Ok(snapshot)
}

/// Names the field of a pool body that does not parse: each field is tried on its own
/// (serde's error on the whole body says where, not which field).
fn pool_field_error(body: &Value, whole: serde_json::Error) -> ChangeError {
    use std::collections::BTreeSet;
    fn check<T: serde::de::DeserializeOwned>(body: &Value, field: &str) -> Option<ChangeError> {
        let value = body.get(field)?;
        serde_json::from_value::<T>(value.clone()).err().map(|e| invalid(field, e.to_string()))
    }
    check::<client::pool::PoolKind>(body, "kind")
        .or_else(|| check::<engine::Weights>(body, "weights"))
        .or_else(|| check::<BTreeMap<Tier, engine::Weights>>(body, "tiers"))
        .or_else(|| check::<u32>(body, "batch_size"))
        .or_else(|| check::<u32>(body, "low_water"))
        .or_else(|| check::<engine::Ordering>(body, "ordering"))
        .or_else(|| check::<String>(body, "timezone"))
        .or_else(|| check::<Vec<engine::peak::PeakWindow>>(body, "peak_windows"))
        .or_else(|| check::<BTreeMap<String, u64>>(body, "caps"))
        .or_else(|| check::<u8>(body, "eject_rebuild_percent"))
        .or_else(|| check::<BTreeSet<String>>(body, "ejected"))
        .unwrap_or_else(|| {
            let message = whole.to_string();
            // "missing field `batch_size`" names its field between backquotes.
            let field =
                message.strip_prefix("missing field `").and_then(|rest| rest.split('`').next()).unwrap_or("snapshot");
            invalid(field, message.clone())
        })
}

fn ordering_name(snapshot: &PoolSnapshot) -> String {
    serde_json::to_value(snapshot.ordering).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// Replaces a pool's rows with what `snapshot` says. Every member must be a registered
/// channel, and a channel with a tier serves only in that tier.
async fn store_pool(
    tx: &mut PgConnection,
    pool: &str,
    snapshot: &PoolSnapshot,
    version: i64,
) -> Result<(), ChangeError> {
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
        "insert into pool (name, kind, batch_size, low_water, ordering, timezone, eject_rebuild_percent, version, config_version, updated_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, 1, now())
         on conflict (name) do update set kind = excluded.kind, batch_size = excluded.batch_size,
             low_water = excluded.low_water, ordering = excluded.ordering, timezone = excluded.timezone,
             eject_rebuild_percent = excluded.eject_rebuild_percent, config_version = pool.config_version + 1,
             updated_at = now()",
    )
    .bind(pool)
    .bind(if tiers_kind { "tiers" } else { "channels" })
    .bind(snapshot.batch_size as i32)
    .bind(snapshot.low_water as i32)
    .bind(ordering_name(snapshot))
    .bind(&snapshot.timezone)
    .bind(i16::from(snapshot.eject_rebuild_percent))
    .bind(version)
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
            "insert into pool_member (pool, channel, tier, position, weight, daily_cap, ejected)
             values ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(pool)
        .bind(channel)
        .bind(tier)
        .bind(position as i32)
        .bind(*weight as i64)
        .bind(snapshot.caps.get(channel).map(|c| *c as i64))
        .bind(snapshot.ejected.contains(channel))
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
    Ok(())
}

/// What a pool publishes: its configured body with health applied. A member health has
/// ejected (or an operator pinned ejected) joins the ejected set; a member health has
/// decayed gets base weight × factor, rounded, at least 1; a member pinned healthy keeps
/// its base weight.
async fn effective_body(tx: &mut PgConnection, pool: &str, mut body: Value) -> Result<Value, sqlx::Error> {
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
async fn republish_pool_body(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    pool: &str,
    action: &str,
) -> Result<(Written, PoolSnapshot), ChangeError> {
    let (_, base) =
        compile_pool(tx, pool).await?.ok_or_else(|| ChangeError::NotFound(format!("unknown pool {pool:?}")))?;
    let body = effective_body(tx, pool, base).await?;
    let entity = format!("pool:{pool}");
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
            .bind(format!("pool:{pool}"))
            .fetch_optional(&mut *tx)
            .await?;
    if latest.as_ref() == Some(&body) {
        return Ok(None);
    }
    republish_pool(tx, ctx, pool, action).await.map(Some)
}

/// What a change to a pool wrote.
#[derive(Debug, Clone)]
pub struct PoolWritten {
    /// The published snapshot's version, audit row and outbox row.
    pub written: Written,
    /// The pool's configuration version after the change (what the next change's
    /// `expected_version` must be). Health changes publish new snapshots but leave it.
    pub config_version: i64,
    /// What the pool now publishes (health applied).
    pub published: PoolSnapshot,
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
    let entity = format!("pool:{pool}");
    lock(tx, &entity).await?;
    let current: Option<(i64, i64)> = sqlx::query_as("select config_version, version from pool where name = $1")
        .bind(pool)
        .fetch_optional(&mut *tx)
        .await?;
    check_version(&entity, expected_version, current.map_or(0, |c| c.0))?;
    store_pool(tx, pool, &snapshot, current.map_or(1, |c| c.1)).await?;
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
    let mut tx = db.begin().await?;
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
    let entity = format!("pool:{pool}");
    lock(&mut tx, &entity).await?;
    let (config_version, body) = compile_pool(&mut tx, pool.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown pool {:?}", pool.as_str())))?;
    check_version(&entity, expected_version, config_version)?;
    let mut snapshot = parse_pool_body(&body)?;
    edit(&mut snapshot)?;
    snapshot.version = 1;
    snapshot.validate().map_err(from_input)?;
    store_pool(&mut tx, pool.as_str(), &snapshot, 1).await?;
    let (written, published) = republish_pool_body(&mut tx, ctx, pool.as_str(), action).await?;
    tx.commit().await?;
    Ok(PoolWritten { written, config_version: config_version + 1, published })
}

// ---------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------

const CHANNEL_COLUMNS: &str = "c.code, c.name, c.tier, c.enabled, c.base_weight, c.version, c.created_at, c.updated_at,
     coalesce((select array_agg(m.pool order by m.pool) from pool_member m where m.channel = c.code), '{}') as pools";

fn channel_row(r: &sqlx::postgres::PgRow) -> Result<Channel, sqlx::Error> {
    Ok(Channel {
        code: r.try_get("code")?,
        name: r.try_get("name")?,
        tier: r.try_get("tier")?,
        enabled: r.try_get("enabled")?,
        base_weight: r.try_get("base_weight")?,
        version: r.try_get("version")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        pools: r.try_get("pools")?,
    })
}

fn channel_json(c: &Channel) -> Value {
    json!({"code": c.code, "name": c.name, "tier": c.tier, "enabled": c.enabled, "base_weight": c.base_weight, "version": c.version})
}

/// Every channel, by code.
pub async fn list_channels(db: &PgPool) -> Result<Vec<Channel>, sqlx::Error> {
    let rows = sqlx::query(&format!("select {CHANNEL_COLUMNS} from channel c order by c.code")).fetch_all(db).await?;
    rows.iter().map(channel_row).collect()
}

async fn channel_in(tx: &mut PgConnection, code: &str) -> Result<Option<Channel>, sqlx::Error> {
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
    let entity = format!("channel:{code}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    if channel_in(&mut tx, code.as_str()).await?.is_some() {
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
    let channel = channel_in(&mut tx, code.as_str()).await?.expect("just inserted");
    let audit_id = audit(&mut tx, ctx, &entity, "channel.create", None, Some(&channel_json(&channel))).await?;
    tx.commit().await?;
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
    let entity = format!("channel:{code}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let before = channel_in(&mut tx, code.as_str())
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
    let after = channel_in(&mut tx, code.as_str()).await?.expect("exists");
    let audit_id =
        audit(&mut tx, ctx, &entity, "channel.update", Some(&channel_json(&before)), Some(&channel_json(&after)))
            .await?;
    tx.commit().await?;
    Ok((Written { entity, action: "channel.update".into(), version: after.version, audit_id, outbox_id: None }, after))
}

/// Enables or disables a channel everywhere: every pool that holds it is republished with
/// the channel ejected (disabled) or drawn again (enabled), in the same transaction.
/// Returns the channel's change first, then each pool's.
pub async fn set_channel_enabled(
    db: &PgPool,
    ctx: &Ctx<'_>,
    code: &ChannelCode,
    enabled: bool,
    expected_version: Option<i64>,
) -> Result<(Vec<Written>, Channel), ChangeError> {
    let entity = format!("channel:{code}");
    let action = if enabled { "channel.enable" } else { "channel.disable" };
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let before = channel_in(&mut tx, code.as_str())
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
    let after = channel_in(&mut tx, code.as_str()).await?.expect("exists");
    let audit_id =
        audit(&mut tx, ctx, &entity, action, Some(&channel_json(&before)), Some(&channel_json(&after))).await?;
    let mut written =
        vec![Written { entity, action: action.into(), version: after.version, audit_id, outbox_id: None }];
    // Pools in name order, so two such changes never wait on each other in a circle.
    for pool in &after.pools {
        lock(&mut tx, &format!("pool:{pool}")).await?;
        let pool_action = if enabled { "pool.channel_enabled" } else { "pool.channel_disabled" };
        written.push(republish_pool(&mut tx, ctx, pool, pool_action).await?);
    }
    tx.commit().await?;
    Ok((written, after))
}

// ---------------------------------------------------------------------------------------
// Plans and tenants
// ---------------------------------------------------------------------------------------

fn plan_row(r: &sqlx::postgres::PgRow) -> Result<Plan, sqlx::Error> {
    Ok(Plan {
        name: r.try_get("name")?,
        monthly_tokens: r.try_get("monthly_tokens")?,
        daily_requests: r.try_get("daily_requests")?,
        concurrency: r.try_get("concurrency")?,
        version: r.try_get("version")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        tenants: r.try_get("tenants")?,
    })
}

const PLAN_COLUMNS: &str =
    "p.name, p.monthly_tokens, p.daily_requests, p.concurrency, p.version, p.created_at, p.updated_at,
     (select count(*) from tenant t where t.plan = p.name) as tenants";

fn plan_json(p: &Plan) -> Value {
    json!({"name": p.name, "monthly_tokens": p.monthly_tokens, "daily_requests": p.daily_requests,
           "concurrency": p.concurrency, "version": p.version})
}

/// Every plan, by name.
pub async fn list_plans(db: &PgPool) -> Result<Vec<Plan>, sqlx::Error> {
    let rows = sqlx::query(&format!("select {PLAN_COLUMNS} from plan p order by p.name")).fetch_all(db).await?;
    rows.iter().map(plan_row).collect()
}

async fn plan_in(tx: &mut PgConnection, name: &str) -> Result<Option<Plan>, sqlx::Error> {
    let row = sqlx::query(&format!("select {PLAN_COLUMNS} from plan p where p.name = $1"))
        .bind(name)
        .fetch_optional(tx)
        .await?;
    row.as_ref().map(plan_row).transpose()
}

/// One plan.
pub async fn get_plan(db: &PgPool, name: &PlanName) -> Result<Option<Plan>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    plan_in(&mut conn, name.as_str()).await
}

/// Creates a plan; 409 when the name is taken.
pub async fn create_plan(
    db: &PgPool,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
) -> Result<(Written, Plan), ChangeError> {
    let entity = format!("plan:{name}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    if plan_in(&mut tx, name.as_str()).await?.is_some() {
        return Err(ChangeError::Duplicate { field: "name".into(), rule: format!("plan {:?} exists", name.as_str()) });
    }
    sqlx::query("insert into plan (name, monthly_tokens, daily_requests, concurrency) values ($1, $2, $3, $4)")
        .bind(name.as_str())
        .bind(spec.monthly_tokens.get() as i64)
        .bind(spec.daily_requests.get() as i64)
        .bind(spec.concurrency as i32)
        .execute(&mut *tx)
        .await?;
    let plan = plan_in(&mut tx, name.as_str()).await?.expect("just inserted");
    let audit_id = audit(&mut tx, ctx, &entity, "plan.create", None, Some(&plan_json(&plan))).await?;
    tx.commit().await?;
    Ok((Written { entity, action: "plan.create".into(), version: 1, audit_id, outbox_id: None }, plan))
}

/// Changes a plan's limits; every tenant on it is republished in the same transaction.
pub async fn update_plan(
    db: &PgPool,
    ctx: &Ctx<'_>,
    name: &PlanName,
    spec: &PlanSpec,
    expected_version: i64,
) -> Result<(Vec<Written>, Plan), ChangeError> {
    let entity = format!("plan:{name}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let before = plan_in(&mut tx, name.as_str())
        .await?
        .ok_or_else(|| ChangeError::NotFound(format!("unknown plan {:?}", name.as_str())))?;
    check_version(&entity, Some(expected_version), before.version)?;
    sqlx::query(
        "update plan set monthly_tokens = $2, daily_requests = $3, concurrency = $4, version = version + 1, updated_at = now()
         where name = $1",
    )
    .bind(name.as_str())
    .bind(spec.monthly_tokens.get() as i64)
    .bind(spec.daily_requests.get() as i64)
    .bind(spec.concurrency as i32)
    .execute(&mut *tx)
    .await?;
    let after = plan_in(&mut tx, name.as_str()).await?.expect("exists");
    let audit_id =
        audit(&mut tx, ctx, &entity, "plan.update", Some(&plan_json(&before)), Some(&plan_json(&after))).await?;
    let mut written =
        vec![Written { entity, action: "plan.update".into(), version: after.version, audit_id, outbox_id: None }];
    let tenants: Vec<String> = sqlx::query_scalar("select name from tenant where plan = $1 order by name")
        .bind(name.as_str())
        .fetch_all(&mut *tx)
        .await?;
    for tenant in tenants {
        lock(&mut tx, &format!("tenant:{tenant}")).await?;
        written.push(republish_tenant(&mut tx, ctx, &tenant, "tenant.plan_changed").await?);
    }
    tx.commit().await?;
    Ok((written, after))
}

fn grant_json(r: &sqlx::postgres::PgRow, with_state: bool) -> Result<Value, sqlx::Error> {
    let kind: String = r.try_get("kind")?;
    let mut grant = json!({
        "id": r.try_get::<String, _>("id")?,
        "kind": kind,
        "amount": r.try_get::<i64, _>("amount")?,
        "starts_at": r.try_get::<Option<DateTime<Utc>>, _>("starts_at")?,
        "expires_at": r.try_get::<Option<DateTime<Utc>>, _>("expires_at")?,
    });
    if kind == "bonus" {
        grant["priority"] = json!(r.try_get::<i32, _>("priority")?);
    }
    if with_state {
        grant["created_at"] = json!(r.try_get::<DateTime<Utc>, _>("created_at")?);
        grant["revoked_at"] = json!(r.try_get::<Option<DateTime<Utc>>, _>("revoked_at")?);
    }
    Ok(grant)
}

/// Compiles a tenant's published quota (without `version`) from its rows.
async fn compile_tenant(tx: &mut PgConnection, tenant: &str) -> Result<Option<(i64, Value)>, sqlx::Error> {
    let Some(row) = sqlx::query(
        "select t.reservation_ttl_ms, t.retention_days, t.fallback_policy, t.fallback_allowance, t.version,
                p.monthly_tokens, p.daily_requests, p.concurrency
         from tenant t join plan p on p.name = t.plan where t.name = $1",
    )
    .bind(tenant)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let grants = sqlx::query(
        "select id, kind, priority, amount, starts_at, expires_at, created_at, revoked_at from quota_grant
         where tenant = $1 and revoked_at is null order by created_at, id",
    )
    .bind(tenant)
    .fetch_all(&mut *tx)
    .await?;
    let grants = grants.iter().map(|g| grant_json(g, false)).collect::<Result<Vec<_>, _>>()?;
    let policy: String = row.try_get("fallback_policy")?;
    let fallback = match row.try_get::<Option<i64>, _>("fallback_allowance")? {
        Some(allowance) => json!({"policy": policy, "allowance": allowance}),
        None => json!({"policy": policy}),
    };
    Ok(Some((
        row.try_get("version")?,
        json!({
            "monthly_tokens": row.try_get::<i64, _>("monthly_tokens")?,
            "daily_requests": row.try_get::<i64, _>("daily_requests")?,
            "concurrency": row.try_get::<i32, _>("concurrency")?,
            "grants": grants,
            "reservation_ttl": row.try_get::<i64, _>("reservation_ttl_ms")?,
            "retention_days": row.try_get::<i32, _>("retention_days")?,
            "fallback": fallback,
        }),
    )))
}

async fn republish_tenant(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    tenant: &str,
    action: &str,
) -> Result<Written, ChangeError> {
    let (_, body) =
        compile_tenant(tx, tenant).await?.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {tenant:?}")))?;
    let written = publish(tx, ctx, &format!("tenant:{tenant}"), action, &body).await?;
    sqlx::query("update tenant set version = $2, updated_at = now() where name = $1")
        .bind(tenant)
        .bind(written.version)
        .execute(&mut *tx)
        .await?;
    Ok(written)
}

/// Every tenant's name, plan and version.
pub async fn list_tenants(db: &PgPool) -> Result<Vec<Value>, sqlx::Error> {
    let rows = sqlx::query(
        "select t.name, t.plan, t.version, t.updated_at,
                (select count(*) from quota_grant g where g.tenant = t.name and g.revoked_at is null
                    and (g.expires_at is null or g.expires_at > now())) as live_grants
         from tenant t order by t.name",
    )
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(json!({
                "name": r.try_get::<String, _>("name")?,
                "plan": r.try_get::<String, _>("plan")?,
                "version": r.try_get::<i64, _>("version")?,
                "updated_at": r.try_get::<DateTime<Utc>, _>("updated_at")?,
                "live_grants": r.try_get::<i64, _>("live_grants")?,
            }))
        })
        .collect()
}

/// One tenant: settings, every grant, and the published snapshot.
pub async fn get_tenant(db: &PgPool, tenant: &TenantId) -> Result<Option<Tenant>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    let Some((version, snapshot)) = compile_tenant(&mut conn, tenant.as_str()).await? else {
        return Ok(None);
    };
    let row = sqlx::query(
        "select name, plan, reservation_ttl_ms, retention_days, fallback_policy, fallback_allowance, updated_at
         from tenant where name = $1",
    )
    .bind(tenant.as_str())
    .fetch_one(&mut *conn)
    .await?;
    let grants = sqlx::query(
        "select id, kind, priority, amount, starts_at, expires_at, created_at, revoked_at from quota_grant
         where tenant = $1 order by created_at, id",
    )
    .bind(tenant.as_str())
    .fetch_all(&mut *conn)
    .await?;
    Ok(Some(Tenant {
        name: row.try_get("name")?,
        plan: row.try_get("plan")?,
        reservation_ttl_ms: row.try_get("reservation_ttl_ms")?,
        retention_days: row.try_get("retention_days")?,
        fallback: snapshot["fallback"].clone(),
        version,
        updated_at: row.try_get("updated_at")?,
        grants: grants.iter().map(|g| grant_json(g, true)).collect::<Result<_, _>>()?,
        snapshot,
    }))
}

/// Creates (`expected_version` 0) or changes a tenant's plan assignment and settings.
pub async fn put_tenant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    spec: &TenantSpec,
    expected_version: i64,
) -> Result<Written, ChangeError> {
    spec.validate()?;
    let entity = format!("tenant:{tenant}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    check_version(&entity, Some(expected_version), current.unwrap_or(0))?;
    if plan_in(&mut tx, spec.plan.as_str()).await?.is_none() {
        return Err(invalid(
            "plan",
            format!("unknown plan {:?}: create it first (POST /api/v1/plans)", spec.plan.as_str()),
        ));
    }
    let (policy, allowance) = match spec.fallback {
        FallbackPolicy::FailClosed => ("fail_closed", None),
        FallbackPolicy::FailOpenLimited { allowance } => ("fail_open_limited", Some(allowance.get() as i64)),
    };
    sqlx::query(
        "insert into tenant (name, plan, reservation_ttl_ms, retention_days, fallback_policy, fallback_allowance, version)
         values ($1, $2, $3, $4, $5, $6, 1)
         on conflict (name) do update set plan = excluded.plan, reservation_ttl_ms = excluded.reservation_ttl_ms,
             retention_days = excluded.retention_days, fallback_policy = excluded.fallback_policy,
             fallback_allowance = excluded.fallback_allowance, updated_at = now()",
    )
    .bind(tenant.as_str())
    .bind(spec.plan.as_str())
    .bind(spec.reservation_ttl_ms)
    .bind(spec.retention_days as i32)
    .bind(policy)
    .bind(allowance)
    .execute(&mut *tx)
    .await?;
    let action = if current.is_some() { "tenant.update" } else { "tenant.create" };
    let written = republish_tenant(&mut tx, ctx, tenant.as_str(), action).await?;
    tx.commit().await?;
    Ok(written)
}

/// Adds a grant to a tenant; refused when its id is taken (revoked ones included) or when
/// it has already expired at `now`.
pub async fn add_grant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    grant: &NewGrant,
    expected_version: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Written, ChangeError> {
    if let Some(expires) = grant.expires_at {
        if expires <= now {
            return Err(invalid(
                "expires_at",
                format!("the grant has already expired ({expires} is not after now, {now})"),
            ));
        }
        if grant.starts_at.is_some_and(|starts| expires <= starts) {
            return Err(invalid("expires_at", "must be after starts_at"));
        }
    }
    // The same rules as the published quota (a kind, a live window), checked once more.
    let as_grant = Grant {
        id: grant.id.clone(),
        kind: grant.kind,
        amount: grant.amount,
        starts_at: grant.starts_at,
        expires_at: grant.expires_at,
    };
    let entity = format!("tenant:{tenant}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let current = current.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    check_version(&entity, expected_version, current)?;
    let taken: Option<Option<DateTime<Utc>>> =
        sqlx::query_scalar("select revoked_at from quota_grant where tenant = $1 and id = $2")
            .bind(tenant.as_str())
            .bind(grant.id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(revoked) = taken {
        let state = if revoked.is_some() { "a revoked grant" } else { "a grant" };
        return Err(ChangeError::Duplicate {
            field: "id".into(),
            rule: format!("{state} with id {:?} exists; ids are never reused", grant.id.as_str()),
        });
    }
    let (kind, priority) = match as_grant.kind {
        GrantKind::Temporary => ("temporary", 0),
        GrantKind::Bonus { priority } => ("bonus", priority),
    };
    if priority > i32::MAX as u32 {
        return Err(invalid("priority", format!("must be at most {}", i32::MAX)));
    }
    sqlx::query(
        "insert into quota_grant (tenant, id, kind, priority, amount, starts_at, expires_at) values ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant.as_str())
    .bind(as_grant.id.as_str())
    .bind(kind)
    .bind(priority as i32)
    .bind(as_grant.amount.get() as i64)
    .bind(as_grant.starts_at)
    .bind(as_grant.expires_at)
    .execute(&mut *tx)
    .await?;
    let written = republish_tenant(&mut tx, ctx, tenant.as_str(), "tenant.grant").await?;
    tx.commit().await?;
    Ok(written)
}

/// Revokes a grant: it is no longer published (its tokens stop being available); the row
/// stays, marked revoked.
pub async fn revoke_grant(
    db: &PgPool,
    ctx: &Ctx<'_>,
    tenant: &TenantId,
    id: &GrantId,
    expected_version: Option<i64>,
) -> Result<Written, ChangeError> {
    let entity = format!("tenant:{tenant}");
    let mut tx = db.begin().await?;
    lock(&mut tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from tenant where name = $1")
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let current = current.ok_or_else(|| ChangeError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    check_version(&entity, expected_version, current)?;
    let revoked: Option<Option<DateTime<Utc>>> =
        sqlx::query_scalar("select revoked_at from quota_grant where tenant = $1 and id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    match revoked {
        None => {
            return Err(ChangeError::NotFound(format!("tenant {:?} has no grant {:?}", tenant.as_str(), id.as_str())))
        }
        Some(Some(at)) => return Err(invalid("id", format!("grant {:?} was already revoked at {at}", id.as_str()))),
        Some(None) => {}
    }
    sqlx::query("update quota_grant set revoked_at = now() where tenant = $1 and id = $2")
        .bind(tenant.as_str())
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
    let written = republish_tenant(&mut tx, ctx, tenant.as_str(), "tenant.revoke").await?;
    tx.commit().await?;
    Ok(written)
}

/// Records a user (the admin API's configured actor, demo users) unless it exists.
pub async fn ensure_user(db: &PgPool, name: &str, role: &str) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query("insert into app_user (name, role) values ($1, $2) on conflict (name) do nothing")
        .bind(name)
        .bind(role)
        .execute(db)
        .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Brings pools and tenants published before the configuration tables existed (snapshots
/// only) into the tables, so the admin API sees them: their channels are registered (named
/// by their code, base weight from the pool), each tenant gets a plan of its own
/// (`<tenant>-plan`) with its limits, and its grants are recorded. Each adoption is audited
/// (actor `migration`, source `system`); no new snapshot is written, since the published
/// one already says the same. Returns the entities adopted.
pub async fn adopt_snapshots(db: &PgPool) -> anyhow::Result<Vec<String>> {
    let orphans: Vec<(String, i64, Value)> = sqlx::query_as(
        "select distinct on (s.entity) s.entity, s.version, s.body from snapshot s
         where (s.entity like 'pool:%' and not exists (select 1 from pool p where 'pool:' || p.name = s.entity))
            or (s.entity like 'tenant:%' and not exists (select 1 from tenant t where 'tenant:' || t.name = s.entity))
         order by s.entity, s.version desc",
    )
    .fetch_all(db)
    .await?;
    let ctx = Ctx {
        actor: "migration",
        source: Source::System,
        reason: Some("adopted from a snapshot written before the configuration tables"),
        request_id: None,
    };
    let mut adopted = Vec::new();
    for (entity, version, body) in orphans {
        // One entity that cannot be adopted is logged and left as a snapshot (still
        // published as before); it does not keep the server from starting.
        match adopt_one(db, &ctx, &entity, version, &body).await {
            Ok(true) => adopted.push(entity),
            Ok(false) => {}
            Err(e) => tracing::error!(
                entity,
                version,
                error = format!("{e:#}"),
                "cannot adopt this snapshot into the configuration tables"
            ),
        }
    }
    Ok(adopted)
}

async fn adopt_one(db: &PgPool, ctx: &Ctx<'_>, entity: &str, version: i64, body: &Value) -> anyhow::Result<bool> {
    use anyhow::Context;
    {
        let mut tx = db.begin().await?;
        lock(&mut tx, entity).await?;
        if let Some(pool) = entity.strip_prefix("pool:") {
            let snapshot = parse_pool_body(body).with_context(|| format!("adopting {entity} v{version}"))?;
            let mut tiers_of: BTreeMap<String, String> = BTreeMap::new();
            for (tier, channels) in &snapshot.tiers {
                for (channel, _) in channels.iter() {
                    tiers_of.insert(channel.to_owned(), tier.as_str().to_owned());
                }
            }
            for (channel, weight) in snapshot.channels().iter() {
                sqlx::query("insert into channel (code, name, tier, base_weight) values ($1, $1, $2, $3) on conflict (code) do nothing")
                    .bind(channel)
                    .bind(tiers_of.get(channel))
                    .bind(weight as i64)
                    .execute(&mut *tx)
                    .await?;
            }
            store_pool(&mut tx, pool, &snapshot, version)
                .await
                .with_context(|| format!("adopting {entity} v{version}"))?;
        } else if let Some(tenant) = entity.strip_prefix("tenant:") {
            let mut versioned = body.clone();
            versioned["version"] = json!(version);
            let quota: client::quota::TenantQuota =
                serde_json::from_value(versioned).with_context(|| format!("adopting {entity} v{version}"))?;
            let concurrency = i32::try_from(quota.concurrency).context("concurrency above 2^31-1")?;
            let limits = (quota.monthly_tokens.get() as i64, quota.daily_requests as i64, concurrency);
            // A plan of the tenant's own: named after it, or after it with a number when
            // that name is a plan with other limits.
            let mut plan = tenant.to_owned();
            for n in 2.. {
                let existing: Option<(i64, i64, i32)> =
                    sqlx::query_as("select monthly_tokens, daily_requests, concurrency from plan where name = $1")
                        .bind(&plan)
                        .fetch_optional(&mut *tx)
                        .await?;
                match existing {
                    Some(found) if found == limits => break,
                    Some(_) => plan = format!("{}-{n}", &tenant[..tenant.len().min(56)]),
                    None => {
                        sqlx::query("insert into plan (name, monthly_tokens, daily_requests, concurrency) values ($1, $2, $3, $4)")
                            .bind(&plan)
                            .bind(limits.0)
                            .bind(limits.1)
                            .bind(limits.2)
                            .execute(&mut *tx)
                            .await?;
                        break;
                    }
                }
            }
            let (policy, allowance) = match quota.fallback {
                FallbackPolicy::FailClosed => ("fail_closed", None),
                FallbackPolicy::FailOpenLimited { allowance } => ("fail_open_limited", Some(allowance.get() as i64)),
            };
            sqlx::query(
                "insert into tenant (name, plan, reservation_ttl_ms, retention_days, fallback_policy, fallback_allowance, version)
                 values ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(tenant)
            .bind(&plan)
            .bind(quota.reservation_ttl.as_millis() as i64)
            .bind(quota.retention_days as i32)
            .bind(policy)
            .bind(allowance)
            .bind(version)
            .execute(&mut *tx)
            .await?;
            for grant in &quota.grants {
                let (kind, priority) = match grant.kind {
                    GrantKind::Temporary => ("temporary", 0),
                    GrantKind::Bonus { priority } => {
                        ("bonus", i32::try_from(priority).context("grant priority above 2^31-1")?)
                    }
                };
                sqlx::query(
                    "insert into quota_grant (tenant, id, kind, priority, amount, starts_at, expires_at) values ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(tenant)
                .bind(grant.id.as_str())
                .bind(kind)
                .bind(priority)
                .bind(grant.amount.get() as i64)
                .bind(grant.starts_at)
                .bind(grant.expires_at)
                .execute(&mut *tx)
                .await?;
            }
        } else {
            return Ok(false);
        }
        audit(&mut tx, ctx, entity, "adopt", None, Some(&json!({"version": version}))).await?;
        tx.commit().await?;
    }
    Ok(true)
}
