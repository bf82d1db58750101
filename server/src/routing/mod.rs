//! Routes: named, ordered rules on a request's attributes that choose the pool it draws
//! from (`engine::route`), configured like pools (versioned, audited, published to Redis,
//! under change requests where the `routes` policy applies) and decided in the data plane
//! by `client::route` without Postgres. [`routes`] is the HTTP API, [`store`] its SQL; the
//! functions here are what the REST handlers and the change requests share.

pub mod routes;
pub mod store;

use client::route::RouteName;

use crate::change::{Ctx, Entity};
use crate::error::ApiError;
use crate::error::ChangeError;

/// The scope of the approval policy that covers every route.
pub const POLICY_SCOPE: &str = "routes";

/// 404 for a route the configuration does not hold.
pub(crate) fn unknown_route(name: &RouteName) -> ApiError {
    ApiError::NotFound(format!("unknown route {:?}", name.as_str()))
}

/// `routes::restore_and_publish` in the caller's transaction, without the policy's check (a change
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
