//! The replies of sign-in, sign-out, who-am-I, and the users' and API tokens' admin
//! routes (`/api/v1/auth…`, `/api/v1/users…`, `/api/v1/tokens…`). Roles are `viewer`,
//! `operator`, `pm`, `auditor` or `admin`; token scopes `dataplane` or `admin`.

use serde::{Deserialize, Serialize};

/// `POST /api/v1/auth/login`: the session opened (its id travels in the cookie only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SignedIn {
    /// The user signed in.
    pub user: String,
    /// Their role.
    pub role: String,
    /// To repeat in `X-CSRF-Token` on unsafe requests made with the cookie.
    pub csrf_token: String,
    /// When the session ends (RFC 3339).
    pub expires_at: String,
}

/// `POST /api/v1/auth/logout`: the session (if any) is ended and the cookie cleared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SignedOut {
    /// Always true.
    pub signed_out: bool,
}

/// `GET /api/v1/auth/me`: who the caller is and how they proved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Me {
    /// The caller's name (a user, a token's name, or the configured actor).
    pub name: String,
    /// `session`, `token`, `configured_token` or `open`.
    pub via: String,
    /// The role, for a session, the configured token and an open server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The scope, for an API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// A user as an admin sees them (never a password hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct User {
    /// The user's name.
    pub name: String,
    /// Their role.
    pub role: String,
    /// When they were created (RFC 3339).
    pub created_at: String,
    /// When they were disabled (RFC 3339); null while enabled.
    pub disabled_at: Option<String>,
    /// Set after repeated failed sign-ins (RFC 3339); in the past once the lock is over.
    pub locked_until: Option<String>,
    /// Whether they have a password (the configured admin token's actor has none).
    pub can_sign_in: bool,
}

/// `GET /api/v1/users`: every user, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UserList {
    /// Every user, by name.
    pub users: Vec<User>,
}

/// `POST /api/v1/users`: the user created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UserCreated {
    /// The user's name.
    pub name: String,
    /// Their role.
    pub role: String,
    /// The generated password, shown this once; absent when the request gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// `POST /api/v1/auth/password`: the caller's password changed, their other sessions ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PasswordChanged {
    /// The user.
    pub name: String,
    /// How many of their other sessions were ended.
    pub sessions_ended: u64,
}

/// `POST /api/v1/users/{name}/password`: a password set by an admin, every session of the
/// user ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PasswordReset {
    /// The user.
    pub name: String,
    /// The generated password, shown this once; absent when the request gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// How many of their sessions were ended.
    pub sessions_ended: u64,
}

/// `POST /api/v1/auth/logout_everywhere`: every session of the caller ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SignedOutEverywhere {
    /// The user.
    pub name: String,
    /// How many sessions were ended, this one included.
    pub sessions_ended: u64,
}

/// `PUT /api/v1/users/{name}/role`: the user's new role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UserRole {
    /// The user's name.
    pub name: String,
    /// Their role from their next request on.
    pub role: String,
}

/// `POST /api/v1/users/{name}/disable`: the user is disabled and signed out everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UserDisabled {
    /// The user's name.
    pub name: String,
    /// Always true.
    pub disabled: bool,
}

/// `POST /api/v1/users/{name}/unlock`: the lock-out is over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UserUnlocked {
    /// The user's name.
    pub name: String,
    /// Always true.
    pub unlocked: bool,
}

/// An API token as an admin sees it (never the secret or its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ApiToken {
    /// The token's id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its first characters, to tell tokens apart.
    pub prefix: String,
    /// Its scope.
    pub scope: String,
    /// Who created it.
    pub created_by: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it was last used (RFC 3339); null if never.
    pub last_used_at: Option<String>,
    /// When it was revoked (RFC 3339); null while live.
    pub revoked_at: Option<String>,
    /// Tenants a data-plane token may reserve, settle and release for (`["*"]`: any).
    pub tenants: Vec<String>,
    /// Pools it may draw from (`["*"]`: any).
    pub pools: Vec<String>,
    /// Routes it may draw through (`["*"]`: any).
    pub routes: Vec<String>,
    /// Channels it may report outcomes for (`["*"]`: any).
    pub channels: Vec<String>,
}

/// What a data-plane token serves, four lists of names, each `["*"]` for any (also what is
/// created later). A list left out of a creation is `["*"]`; an empty list serves nothing
/// of its kind. At most 1000 names a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenBindings {
    /// Tenants the token may reserve, settle and release for: names (1..=64 of
    /// `[A-Za-z0-9_-]`), or `["*"]`.
    #[serde(default = "any")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 1000))]
    pub tenants: Vec<String>,
    /// Pools the token may draw from: names, or `["*"]`.
    #[serde(default = "any")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 1000))]
    pub pools: Vec<String>,
    /// Routes the token may draw through: names, or `["*"]`.
    #[serde(default = "any")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 1000))]
    pub routes: Vec<String>,
    /// Channels the token may report outcomes for: codes (1..=64 of `[A-Za-z0-9_.-]`), or
    /// `["*"]`.
    #[serde(default = "any")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 1000))]
    pub channels: Vec<String>,
}

fn any() -> Vec<String> {
    vec!["*".to_owned()]
}

impl Default for TokenBindings {
    fn default() -> Self {
        Self { tenants: any(), pools: any(), routes: any(), channels: any() }
    }
}

/// `PUT /api/v1/tokens/{id}/bindings`: what the token serves now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TokenBound {
    /// The token's id.
    pub id: i64,
    /// What it serves now.
    pub bindings: TokenBindings,
}

/// `GET /api/v1/tokens`: every API token, by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TokenList {
    /// Every API token, by id.
    pub tokens: Vec<ApiToken>,
}

/// `POST /api/v1/tokens`: the token created, with its secret shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TokenCreated {
    /// The token's id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its scope.
    pub scope: String,
    /// The token itself (`tsr_…`): only its hash is kept.
    pub token: String,
}

/// `POST /api/v1/tokens/{id}/revoke`: the token stopped working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct TokenRevoked {
    /// The token's id.
    pub id: i64,
    /// Always true.
    pub revoked: bool,
}
