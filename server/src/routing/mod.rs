//! Routes: named, ordered rules on a request's attributes that choose the pool it draws
//! from (`engine::route`), configured like pools (versioned, audited, published to Redis,
//! under change requests where the `routes` policy applies) and decided in the data plane
//! by `client::route` without Postgres. [`routes`] is the HTTP API, [`store`] its SQL; the
//! functions here are what the REST handlers and the UI's server functions share.

pub mod routes;
pub mod store;

use client::route::{RouteName, RouteSnapshot};
use engine::route::Route;
use serde_json::Value;

use crate::change::{ChangeError, Ctx, Entity};
use crate::error::ApiError;
use crate::http::Actor;
use crate::publish::publish_now;
use crate::state::AppState;

/// The scope of the approval policy that covers every route.
pub const POLICY_SCOPE: &str = "routes";

/// 404 for a route the configuration does not hold.
pub(crate) fn unknown_route(name: &RouteName) -> ApiError {
    ApiError::NotFound(format!("unknown route {:?}", name.as_str()))
}

/// A route's body as it is stored and published: `{"rules", "default_pool"}` (canonical),
/// parsed into what the data plane decides with, with its version.
pub fn snapshot_of(version: i64, body: &Value) -> Result<RouteSnapshot, ChangeError> {
    let loose: engine::route::Loose = serde_json::from_value(body.clone())
        .map_err(|e| ChangeError::Invalid { field: "route".into(), rule: e.to_string() })?;
    RouteSnapshot::parse(u64::try_from(version).unwrap_or(0), &loose)
        .map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
}

/// Creates (`expected_version` 0) or replaces a route, as one audited change, and
/// publishes it at once (the outbox delivers it otherwise). 409 where the `routes`
/// approval policy applies: the change then goes through a change request.
pub(crate) async fn put_route(
    state: &AppState,
    who: &Actor,
    name: &RouteName,
    route: &Route,
    expected_version: i64,
) -> Result<api::WriteReply, ApiError> {
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &Entity::route_key(name)).await?;
    crate::approvals::policy::store::refuse_scope(&mut *tx, POLICY_SCOPE).await?;
    let written = store::put_route_tx(&mut tx, &who.ctx(), name, route, expected_version, "route.put").await?;
    tx.commit().await?;
    Ok(published(state, name, written).await)
}

/// Makes a new version of a route equal to its version `version` (a roll forward),
/// audited as `route.restore_version`; refused as `PUT` would refuse it (a pool it names
/// that no longer exists, an approval policy), for the current version (422) and for a
/// version the history does not hold (404).
pub(crate) async fn restore_route(
    state: &AppState,
    who: &Actor,
    name: &RouteName,
    version: i64,
    expected_version: i64,
) -> Result<api::WriteReply, ApiError> {
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &Entity::route_key(name)).await?;
    crate::approvals::policy::store::refuse_scope(&mut *tx, POLICY_SCOPE).await?;
    let written = restore_route_tx(&mut tx, &who.ctx(), name, version, expected_version).await?;
    tx.commit().await?;
    Ok(published(state, name, written).await)
}

/// [`restore_route`] in the caller's transaction, without the policy's check (a change
/// request applies it so).
pub(crate) async fn restore_route_tx(
    tx: &mut sqlx::PgConnection,
    ctx: &Ctx<'_>,
    name: &RouteName,
    version: i64,
    expected_version: i64,
) -> Result<crate::change::Written, ChangeError> {
    let current = store::current_version(&mut *tx, name).await?;
    if current == 0 {
        return Err(ChangeError::NotFound(format!("unknown route {:?}", name.as_str())));
    }
    crate::change::check_version(&Entity::route_key(name), Some(expected_version), current)?;
    let body = store::version_body(&mut *tx, name, version, current).await?;
    let route = store::parse_route_body(&body)?;
    store::put_route_tx(tx, ctx, name, &route, current, "route.restore_version").await
}

/// Publishes what a change wrote and makes this instance's data plane see it at once.
async fn published(state: &AppState, name: &RouteName, written: crate::change::Written) -> api::WriteReply {
    let published = publish_now(state).await;
    state.routes.recheck(name);
    api::WriteReply::of(std::slice::from_ref(&written), published)
}
