//! Change requests as the changes page shows them (the API's own reply type).

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;

pub use api::changes::{BreakGlass, ChangeRequest};

/// The newest change requests (at most 200), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "changes", input = GetUrl)]
pub async fn list_changes() -> Result<Vec<ChangeRequest>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.changes().await.map_err(ServerFnError::new)
}

/// The break-glass operations no auditor has acknowledged yet (newest first), for any
/// signed-in user.
#[server(prefix = "/sfn", endpoint = "break_glass", input = GetUrl)]
pub async fn list_break_glass() -> Result<Vec<BreakGlass>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.break_glass().await.map_err(ServerFnError::new)
}
