//! Ramps as the ramp page and the dashboard show them.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;

/// The pool's newest ramp (live or not; `None` when it never had one), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "pool_ramp", input = GetUrl)]
pub async fn pool_ramp(pool: String) -> Result<Option<api::ramps::RampDetail>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.pool_ramp(pool).await.map_err(ServerFnError::new)
}

/// The ramps running, paused or aborting now, for any signed-in user.
#[server(prefix = "/sfn", endpoint = "live_ramps", input = GetUrl)]
pub async fn live_ramps() -> Result<Vec<api::ramps::RampSummary>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.live_ramps().await.map_err(ServerFnError::new)
}
