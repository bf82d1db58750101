//! The route tables (`migrations/0017_routes.sql`): a route and its rules as rows. Every
//! write is one transaction (design.md §5): the rows, the route's next snapshot version with
//! its audit row and outbox row (entity `route:<name>`), and the version in
//! `config_history`, or nothing.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use client::route::RouteName;
use engine::route::{Loose, Route};
use serde_json::{json, Value};
use sqlx::{PgConnection, PgPool, Row};

use crate::change::store::{lock, publish};
use crate::change::{check_version, Ctx, Entity, Written};
use crate::error::ChangeError;
use crate::inputs::invalid;

/// Every route, by name.
pub async fn list_routes(db: &PgPool) -> Result<Vec<api::routes::RouteSummary>, sqlx::Error> {
    let rows = sqlx::query(
        "select r.name, r.version, r.default_pool, r.updated_at,
                count(u.position) as rules,
                array(select distinct p from unnest(array_agg(u.pool) || r.default_pool) p where p is not null order by 1) as pools
         from route r left join route_rule u on u.route = r.name
         group by r.name order by r.name",
    )
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(api::routes::RouteSummary {
                name: r.try_get("name")?,
                version: r.try_get("version")?,
                rules: r.try_get("rules")?,
                default_pool: r.try_get("default_pool")?,
                pools: r.try_get("pools")?,
                updated_at: crate::inputs::rfc3339(r.try_get("updated_at")?),
            })
        })
        .collect()
}

/// A route's version, its body compiled from its rows (the canonical JSON form) and when
/// it last changed; `None` when there is no such route.
pub(crate) async fn compile_route(
    tx: &mut PgConnection,
    name: &str,
) -> Result<Option<(i64, Value, DateTime<Utc>)>, sqlx::Error> {
    let Some(row) = sqlx::query("select version, default_pool, updated_at from route where name = $1")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let rules = sqlx::query("select name, conditions, pool from route_rule where route = $1 order by position")
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
    let rules = rules
        .iter()
        .map(|r| {
            Ok(json!({
                "name": r.try_get::<String, _>("name")?,
                "when": r.try_get::<Value, _>("conditions")?,
                "pool": r.try_get::<String, _>("pool")?,
            }))
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let body = json!({"rules": rules, "default_pool": row.try_get::<String, _>("default_pool")?});
    Ok(Some((row.try_get("version")?, body, row.try_get("updated_at")?)))
}

/// A route as configured (see [`compile_route`]).
pub async fn get_route(db: &PgPool, name: &RouteName) -> Result<Option<(i64, Value, DateTime<Utc>)>, sqlx::Error> {
    let mut conn = db.acquire().await?;
    compile_route(&mut conn, name.as_str()).await
}

/// Parses a stored or proposed route body, naming the field of the first rule it breaks
/// (422).
pub fn parse_route_body(body: &Value) -> Result<Route, ChangeError> {
    let loose: Loose =
        serde_json::from_value(body.clone()).map_err(|e| invalid("route", format!("is not a JSON object: {e}")))?;
    Route::parse(&loose).map_err(|e| invalid(e.field, e.rule))
}

/// Creates (`expected_version` 0) or replaces the route `name` with `route`, in the
/// caller's transaction: its rows, its next snapshot version (audited as `action`, the
/// previous body as `before`), its outbox row and its history row. Every pool it names
/// must exist (422 naming the rule's `pool` or `default_pool`).
pub async fn put_route_tx(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    name: &RouteName,
    route: &Route,
    expected_version: i64,
    action: &str,
) -> Result<Written, ChangeError> {
    let entity = Entity::route_key(name);
    lock(&mut *tx, &entity).await?;
    let current: Option<i64> = sqlx::query_scalar("select version from route where name = $1")
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    check_version(&entity, Some(expected_version), current.unwrap_or(0))?;
    let named: Vec<String> = route.pools().into_iter().map(str::to_owned).collect();
    let known: BTreeSet<String> = sqlx::query_scalar("select name from pool where name = any($1)")
        .bind(&named)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let unknown = |pool: &str| !known.contains(pool);
    if let Some((i, rule)) = route.rules().iter().enumerate().find(|(_, r)| unknown(r.pool())) {
        return Err(invalid(format!("rules[{i}].pool"), format!("unknown pool {:?}: create it first", rule.pool())));
    }
    if unknown(route.default_pool()) {
        return Err(invalid("default_pool", format!("unknown pool {:?}: create it first", route.default_pool())));
    }
    let body = serde_json::to_value(route).map_err(|e| invalid("route", e.to_string()))?;
    let written = publish(&mut *tx, ctx, &entity, action, &body).await?;
    sqlx::query(
        "insert into route (name, default_pool, version) values ($1, $2, $3)
         on conflict (name) do update set default_pool = excluded.default_pool, version = excluded.version,
             updated_at = now()",
    )
    .bind(name.as_str())
    .bind(route.default_pool())
    .bind(written.version)
    .execute(&mut *tx)
    .await?;
    sqlx::query("delete from route_rule where route = $1").bind(name.as_str()).execute(&mut *tx).await?;
    for (position, rule) in body["rules"].as_array().into_iter().flatten().enumerate() {
        sqlx::query("insert into route_rule (route, position, name, conditions, pool) values ($1, $2, $3, $4, $5)")
            .bind(name.as_str())
            .bind(position as i32)
            .bind(rule["name"].as_str())
            .bind(&rule["when"])
            .bind(rule["pool"].as_str())
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("insert into config_history (entity, config_version, body, actor, action) values ($1, $2, $3, $4, $5)")
        .bind(&entity)
        .bind(written.version)
        .bind(&body)
        .bind(ctx.actor)
        .bind(action)
        .execute(&mut *tx)
        .await?;
    Ok(written)
}

/// The route's current version and every version, newest first; `None` for no such route.
pub async fn route_history(db: &PgPool, name: &RouteName) -> Result<Option<api::routes::RouteHistory>, sqlx::Error> {
    let Some(version) = sqlx::query_scalar::<_, i64>("select version from route where name = $1")
        .bind(name.as_str())
        .fetch_optional(db)
        .await?
    else {
        return Ok(None);
    };
    let rows = sqlx::query(
        "select config_version, created_at, actor, action, body from config_history
         where entity = $1 order by config_version desc",
    )
    .bind(Entity::route_key(name))
    .fetch_all(db)
    .await?;
    let versions = rows
        .iter()
        .map(|r| {
            Ok(api::routes::RouteVersion {
                version: r.try_get("config_version")?,
                at: crate::inputs::rfc3339(r.try_get("created_at")?),
                actor: r.try_get("actor")?,
                action: r.try_get("action")?,
                route: r.try_get("body")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some(api::routes::RouteHistory { version, versions }))
}

/// The body of a route's recorded version (404 when the history does not hold it, 422 for
/// the current version).
pub(crate) async fn version_body(
    tx: &mut PgConnection,
    name: &RouteName,
    version: i64,
    current: i64,
) -> Result<Value, ChangeError> {
    if version < 1 {
        return Err(ChangeError::Malformed { field: "version".into(), rule: "must be a version (1 or more)".into() });
    }
    if version == current {
        return Err(invalid("version", format!("{version} is the route's current version")));
    }
    let body: Option<Value> =
        sqlx::query_scalar("select body from config_history where entity = $1 and config_version = $2")
            .bind(Entity::route_key(name))
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?;
    body.ok_or_else(|| ChangeError::NotFound(format!("route {:?} has no version {version}", name.as_str())))
}

/// The route's current version (0 when it does not exist), in the caller's transaction.
pub(crate) async fn current_version(tx: &mut PgConnection, name: &RouteName) -> Result<i64, sqlx::Error> {
    let v: Option<i64> = sqlx::query_scalar("select version from route where name = $1")
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    Ok(v.unwrap_or(0))
}
