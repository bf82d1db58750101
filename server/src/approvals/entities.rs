//! Change requests of channels, plans, tenants and routes: the operation is checked by running it
//! in a savepoint of the submitting transaction and rolling it back (so it is refused
//! exactly as the direct write would refuse it, and the diff is what the write does), and
//! applied by running it for real, in the request's own transaction.

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use super::operation::Operation;
use crate::change::Ctx;
use crate::channels::{ChannelCode, ChannelSpec};
use crate::error::ApiError;
use crate::error::ChangeError;
use crate::plans::{PlanName, PlanSpec};
use crate::tenants::TenantSpec;
use client::pool::PoolName;
use client::quota::TenantId;

/// What a change request is about.
#[derive(Debug, Clone)]
pub enum Target {
    Pool(PoolName),
    Channel(ChannelCode),
    Plan(PlanName),
    Tenant(TenantId),
    Route(client::route::RouteName),
}

impl Target {
    /// Parses `pool:<name>`, `channel:<code>`, `plan:<name>`, `tenant:<name>` or
    /// `route:<name>` (400 naming `entity` otherwise).
    pub fn parse(key: &str) -> Result<Self, ApiError> {
        let bad = |rule: String| ApiError::bad_request("entity", rule);
        let (kind, name) = key.split_once(':').ok_or_else(|| {
            bad(format!("{key:?} is not pool:<name>, channel:<code>, plan:<name>, tenant:<name> or route:<name>"))
        })?;
        Ok(match kind {
            "pool" => Target::Pool(PoolName::parse(name).map_err(|e| bad(e.rule))?),
            "channel" => Target::Channel(ChannelCode::parse(name).map_err(|e| bad(e.rule))?),
            "plan" => Target::Plan(PlanName::parse(name).map_err(|e| bad(e.rule))?),
            "tenant" => Target::Tenant(TenantId::parse(name).map_err(|e| bad(e.rule))?),
            "route" => Target::Route(client::route::RouteName::parse(name).map_err(|e| bad(e.rule))?),
            _ => return Err(bad(format!("{kind:?} is not pool, channel, plan, tenant or route"))),
        })
    }

    /// The stored key.
    pub fn key(&self) -> String {
        match self {
            Target::Pool(p) => crate::change::Entity::pool_key(p),
            Target::Channel(c) => format!("channel:{c}"),
            Target::Plan(p) => format!("plan:{p}"),
            Target::Tenant(t) => crate::change::Entity::tenant_key(t),
            Target::Route(r) => crate::change::Entity::route_key(r),
        }
    }

    /// `pool`, `channel`, `plan`, `tenant` or `route`.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Pool(_) => "pool",
            Target::Channel(_) => "channel",
            Target::Plan(_) => "plan",
            Target::Tenant(_) => "tenant",
            Target::Route(_) => "route",
        }
    }

    /// The policy scope of a channel, plan, tenant or route (a pool's is its own or `pools`).
    pub fn scope(&self) -> &'static str {
        match self {
            Target::Pool(_) => "pools",
            Target::Channel(_) => "channels",
            Target::Plan(_) => "plans",
            Target::Tenant(_) => "tenants",
            Target::Route(_) => crate::routing::POLICY_SCOPE,
        }
    }
}

/// A channel, plan or tenant as it stands (its version, 0 when it does not exist, and what
/// reviewers compare).
pub(crate) async fn current(tx: &mut PgConnection, target: &Target) -> Result<(i64, Value), sqlx::Error> {
    Ok(match target {
        Target::Channel(code) => match crate::channels::store::channel_in(tx, code.as_str()).await? {
            Some(c) => (c.version, crate::channels::store::channel_json(&c)),
            None => (0, Value::Null),
        },
        Target::Plan(name) => match crate::plans::store::plan_in(tx, name.as_str()).await? {
            Some(p) => (p.version, crate::plans::store::plan_json(&p)),
            None => (0, Value::Null),
        },
        Target::Tenant(t) => match crate::tenants::store::compile_tenant(tx, t.as_str()).await? {
            Some((version, mut body)) => {
                body["plan"] = json!(crate::tenants::store::tenant_plan(tx, t.as_str()).await?);
                (version, body)
            }
            None => (0, Value::Null),
        },
        Target::Route(r) => match crate::routing::store::compile_route(tx, r.as_str()).await? {
            Some((version, body, _)) => (version, body),
            None => (0, Value::Null),
        },
        Target::Pool(_) => (0, Value::Null),
    })
}

fn spec<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, ApiError> {
    serde_json::from_value(body).map_err(|e| ApiError::from_serde_message(&e.to_string()))
}

/// Runs `operation` on `target` (made against `base`) in the caller's transaction, as the
/// direct write would, without the policy's check.
pub(crate) async fn execute(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    target: &Target,
    operation: &Operation,
    base: i64,
) -> Result<(), ApiError> {
    let mismatch = || ApiError::Unprocessable {
        field: "operation".into(),
        rule: format!("{} changes a {}, not a {}", operation.action(), operation.entity_kind(), target.kind()),
    };
    let fields = serde_json::to_value(operation).unwrap_or(Value::Null);
    let body = |keys: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        for k in keys {
            if let Some(v) = fields.get(*k) {
                out.insert((*k).to_owned(), v.clone());
            }
        }
        Value::Object(out)
    };
    if let Operation::PlanRestoreVersion { version }
    | Operation::TenantRestoreVersion { version }
    | Operation::RouteRestoreVersion { version } = operation
    {
        if *version < 1 {
            return Err(ApiError::bad_request("version", "must be a version (1 or more)"));
        }
    }
    let done: Result<(), ChangeError> = match (target, operation) {
        (Target::Channel(code), Operation::ChannelCreate { enabled, .. }) => {
            let s: ChannelSpec = spec(body(&["name", "tier", "base_weight"]))?;
            crate::channels::store::create_channel_tx(tx, ctx, code, &s, enabled.unwrap_or(true)).await.map(|_| ())
        }
        (Target::Channel(code), Operation::ChannelUpdate { .. }) => {
            let s: ChannelSpec = spec(body(&["name", "tier", "base_weight"]))?;
            crate::channels::store::update_channel_tx(tx, ctx, code, &s, base).await.map(|_| ())
        }
        (Target::Plan(name), Operation::PlanCreate { .. }) => {
            let s: PlanSpec = spec(body(&["monthly_tokens", "daily_requests", "concurrency"]))?;
            crate::plans::store::create_plan_tx(tx, ctx, name, &s).await.map(|_| ())
        }
        (Target::Plan(name), Operation::PlanUpdate { .. }) => {
            let s: PlanSpec = spec(body(&["monthly_tokens", "daily_requests", "concurrency"]))?;
            crate::tenants::update_plan_tx(tx, ctx, name, &s, base).await.map(|_| ())
        }
        (Target::Plan(name), Operation::PlanRestoreVersion { version }) => {
            crate::tenants::restore_plan_tx(tx, ctx, name, *version, base).await.map(|_| ())
        }
        (Target::Tenant(t), Operation::TenantPut { .. }) => {
            let s: TenantSpec =
                spec(body(&["plan", "reservation_ttl_ms", "retention_days", "idempotency_window_ms", "fallback"]))?;
            crate::tenants::store::put_tenant_tx(tx, ctx, t, &s, base).await.map(|_| ())
        }
        (Target::Tenant(t), Operation::TenantRestoreVersion { version }) => {
            crate::tenants::store::restore_tenant_tx(tx, ctx, t, *version, base).await.map(|_| ())
        }
        (Target::Route(r), Operation::RoutePut { .. }) => {
            let route = crate::routing::store::parse_route_body(&body(&["rules", "default_pool"]))?;
            crate::routing::store::put_route_tx(tx, ctx, r, &route, base, "route.put").await.map(|_| ())
        }
        (Target::Route(r), Operation::RouteRestoreVersion { version }) => {
            crate::routing::restore_route_tx(tx, ctx, r, *version, base).await.map(|_| ())
        }
        _ => return Err(mismatch()),
    };
    done.map_err(ApiError::from)
}

/// What a request of `operation` on `target` (made against `expected`) shows reviewers:
/// the entity before and after, each field that changes. The operation runs in a savepoint
/// that is rolled back: refused as the direct write would refuse it. Answers the base
/// version and the diff.
pub(crate) async fn proposed(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    target: &Target,
    operation: &Operation,
    expected: i64,
) -> Result<(i64, Value), ApiError> {
    let (version, before) = current(tx, target).await?;
    if version != expected {
        return Err(ApiError::Conflict { entity: target.key(), expected, current: version });
    }
    let mut trial = tx.begin().await?;
    execute(&mut trial, ctx, target, operation, version).await?;
    let (_, after) = current(&mut trial, target).await?;
    trial.rollback().await?;
    let diff = json!({
        "before": before,
        "after": after,
        "changes": super::diff::json_changes(&before, &after),
        "moved_percent": 0.0,
        "risk": [],
    });
    Ok((version, diff))
}

/// Applies an approved request of a channel, plan or tenant in the caller's transaction:
/// the outcome (`{"version"}`), or why not and the entity's version when it moved since the
/// request's base version (the request is then suspended).
pub(crate) async fn apply(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    request: &api::changes::ChangeRequest,
    target: &Target,
) -> Result<Result<Value, (String, i64)>, ApiError> {
    let (now, _) = current(tx, target).await?;
    if now != request.base_version {
        let why = format!("{} is at version {now}, not {}", target.key(), request.base_version);
        return Ok(Err((why, now)));
    }
    let operation = Operation::from_stored(request.id, &request.operation)?;
    let reason = match &operation {
        Operation::PlanRestoreVersion { version }
        | Operation::TenantRestoreVersion { version }
        | Operation::RouteRestoreVersion { version } => {
            format!("change request {}: restores version {version}: {}", request.id, request.reason)
        }
        _ => format!("change request {}: {}", request.id, request.reason),
    };
    let change_ctx = Ctx { reason: Some(&reason), ..*ctx };
    execute(tx, &change_ctx, target, &operation, now).await?;
    let (version, _) = current(tx, target).await?;
    Ok(Ok(json!({"version": version})))
}
