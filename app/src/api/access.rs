//! Users and API tokens as the users page shows them (admins only). Changes go to the
//! REST API (`/api/v1/users`, `/api/v1/tokens`), which audits them.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A user (never their password hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    /// `viewer`, `operator`, `pm`, `auditor` or `admin`.
    pub role: String,
    /// When the user was created (UTC, to the minute).
    pub created_at: String,
    /// When the user was disabled, if they were.
    pub disabled_at: Option<String>,
    /// Until when sign-in is locked after repeated failures; `None` when not locked now.
    pub locked_until: Option<String>,
    /// Has a password (the configured admin token's actor is a user without one).
    pub can_sign_in: bool,
}

/// An API token (never its secret or hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    pub id: i64,
    pub name: String,
    /// The token's first characters, to tell tokens apart.
    pub prefix: String,
    /// `dataplane` or `admin`.
    pub scope: String,
    /// Who created it (its owner).
    pub created_by: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// What a data-plane token serves (`["*"]`: any, as tokens made before bindings do).
    pub bindings: api::access::TokenBindings,
}

/// Rows per page of the users list.
pub const USER_PAGE_SIZE: u32 = 50;

/// How the users list may be sorted: the `sort` value and what the page calls it.
pub const USER_SORTS: [(&str, &str); 3] =
    [("name", "Name"), ("role", "Role, then name"), ("created", "Created, newest first")];

/// Everything the users page lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessView {
    /// A page of the users whose name or role holds the search (default sort `name`).
    pub users: super::lists::ListPage<UserView>,
    /// By id.
    pub tokens: Vec<TokenView>,
}

/// A page of users (searched, sorted and paged on the server) and every API token, for
/// admins only: the server's guard answers 403 to anyone else over HTTP, and the function
/// checks again itself. The query's parts are separate optional arguments, so that a query
/// string without them reads as "the first page of every user".
#[server(prefix = "/sfn", endpoint = "access", input = GetUrl)]
pub async fn list_access(
    q: Option<String>,
    sort: Option<String>,
    page: Option<u32>,
) -> Result<AccessView, ServerFnError> {
    super::session::ssr::require(|s| s.may_manage_access, "list users and API tokens").await?;
    let backend = super::backend()?;
    let users = backend.users(super::lists::ListQuery { q, sort, page }).await.map_err(ServerFnError::new)?;
    let tokens = backend.tokens().await.map_err(ServerFnError::new)?;
    Ok(AccessView { users, tokens })
}
