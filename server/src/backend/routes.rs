//! One route as its page shows it: the route, every pool a rule may name, and the policy
//! that sends its changes through change requests, if any.

use app::api::routes::RouteView;
use app::api::BackendError;

use super::unavailable;
use crate::state::AppState;

pub(super) async fn route(state: &AppState, name: String) -> Result<Option<RouteView>, BackendError> {
    let Ok(name) = client::route::RouteName::parse(&name) else { return Ok(None) };
    let Some((version, body, updated_at)) =
        crate::routing::store::get_route(&state.db, &name).await.map_err(unavailable)?
    else {
        return Ok(None);
    };
    let described = match crate::routing::store::parse_route_body(&body) {
        Ok(route) => route.rules().iter().map(|r| r.describe()).collect(),
        Err(_) => Vec::new(),
    };
    let pools = crate::pools::store::list_pools(&state.db).await.map_err(unavailable)?;
    let policy =
        crate::gate::policy::store::policy_of(&state.db, crate::routing::POLICY_SCOPE).await.map_err(unavailable)?;
    Ok(Some(RouteView {
        detail: api::routes::RouteDetail {
            name: name.to_string(),
            version,
            route: body,
            described,
            updated_at: crate::inputs::rfc3339(updated_at),
        },
        pools: pools.into_iter().map(|p| p.name).collect(),
        policy: policy.map(|p| p.scope),
    }))
}
