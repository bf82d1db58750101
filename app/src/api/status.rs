//! The system status the dashboard shows: dependencies and the newest snapshot.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;

pub use api::{DependencyStatus, SystemStatus};

/// The current system status, checked now, for any signed-in user. A GET: reads carry no
/// CSRF token, and the server refuses session writes without one.
#[server(prefix = "/sfn", endpoint = "system_status", input = GetUrl)]
pub async fn get_system_status() -> Result<SystemStatus, ServerFnError> {
    super::session::ssr::require_session().await?;
    Ok(super::backend()?.system_status().await)
}
