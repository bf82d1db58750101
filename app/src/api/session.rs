//! Who is signed in: asked on the server (the session cookie is HttpOnly), during SSR and
//! from the browser alike.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// The session cookie's name (the server sets it at sign-in and reads it here).
pub const SESSION_COOKIE: &str = api::SESSION_COOKIE;

/// The signed-in person, as the UI needs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The user name (the actor audit rows name).
    pub user: String,
    /// `viewer`, `operator`, `pm`, `auditor` or `admin`.
    pub role: String,
    /// Repeated as `X-CSRF-Token` on the UI's writes to `/api/v1` (empty in open mode,
    /// where none is asked).
    pub csrf_token: String,
    /// May verify the audit chain and export it as CSV (auditor, admin).
    pub may_export_audit: bool,
    /// May change configuration such as weights (pm, admin).
    pub may_edit: bool,
    /// May disable and enable channels and pin their health (operator, admin).
    pub may_operate: bool,
    /// May pause, step back and abort a ramp (operator, pm, admin).
    pub may_halt: bool,
    /// May list and manage users and API tokens (admin).
    pub may_manage_access: bool,
}

/// The signed-in person, or `None` when the request carries no valid session. Served as a
/// GET (a read: no CSRF token needed) and open to signed-out callers: the sign-in page
/// asks it.
#[server(prefix = "/sfn", endpoint = "whoami", input = GetUrl)]
pub async fn whoami() -> Result<Option<SessionInfo>, ServerFnError> {
    ssr::current_session().await
}

#[cfg(feature = "ssr")]
pub(crate) mod ssr {
    use leptos::prelude::ServerFnError;

    use super::SessionInfo;

    /// The session of the request being served (over HTTP or during SSR).
    pub async fn current_session() -> Result<Option<SessionInfo>, ServerFnError> {
        let req: actix_web::HttpRequest = leptos_actix::extract().await?;
        let host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("");
        let cookie =
            api::session_cookie(api::is_loopback_host(host), |name| req.cookie(name).map(|c| c.value().to_owned()));
        crate::api::backend()?.whoami(cookie).await.map_err(ServerFnError::new)
    }

    /// The session, or an error for server functions that need one. Over HTTP the server's
    /// guard has already answered 401 to signed-out calls; this covers calls made during
    /// SSR (where setting a status would override the page's redirect).
    pub async fn require_session() -> Result<SessionInfo, ServerFnError> {
        match current_session().await? {
            Some(s) => Ok(s),
            None => Err(ServerFnError::new("not signed in: sign in first")),
        }
    }

    /// The session, or an error unless `allowed` says it may do what the server function
    /// does (`what`, for the message). Over HTTP the server's guard refuses such calls
    /// with a 403 already; this is the function's own check, and covers calls made
    /// during SSR.
    pub async fn require(allowed: impl Fn(&SessionInfo) -> bool, what: &str) -> Result<SessionInfo, ServerFnError> {
        let session = require_session().await?;
        if !allowed(&session) {
            return Err(ServerFnError::new(format!("role {} may not {what}", session.role)));
        }
        Ok(session)
    }
}
