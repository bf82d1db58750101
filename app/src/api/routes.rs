//! Routes as the routes pages show them: the list, and one route with its rules (and
//! whether an approval policy sends its changes through change requests).

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

pub use api::routes::{RouteDetail, RouteSummary};

/// One route as its page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteView {
    pub detail: RouteDetail,
    /// Every pool there is (what a rule may name), by name.
    pub pools: Vec<String>,
    /// The approval policy's scope when one applies (`routes`): saving submits a change
    /// request instead.
    pub policy: Option<String>,
}

/// Every route, by name, for any signed-in user.
#[server(prefix = "/sfn", endpoint = "routes", input = GetUrl)]
pub async fn list_routes() -> Result<Vec<RouteSummary>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.routes().await.map_err(ServerFnError::new)
}

/// One route (`None` when there is no such route), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "route", input = GetUrl)]
pub async fn get_route(name: String) -> Result<Option<RouteView>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.route(name).await.map_err(ServerFnError::new)
}
