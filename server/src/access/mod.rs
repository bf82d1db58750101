//! Identity and access: users with argon2id password hashes, login sessions (HttpOnly,
//! SameSite=Strict cookies; Secure over TLS), login throttling and lock-out, API tokens
//! with a scope, roles, and the guard that enforces who may call which `/api/v1` route and
//! which UI server function (`/sfn`, see [`server_fn_requirement`]).
//!
//! Every `/api/v1` route has a requirement in [`requirement`]; a route missing from it is
//! refused to everyone but admins, so a new endpoint is never open by accident. Requests
//! carry either a bearer token (an API token, or the configured admin token) or the
//! session cookie; unsafe requests made with the cookie must also come from the same
//! origin and carry the session's CSRF token (`X-CSRF-Token`).

pub mod account;
pub mod bindings;
pub mod guard;
pub mod passwords;
pub mod routes;
pub mod sessions;
pub mod store;
pub mod tokens;

pub use guard::guard;
pub use passwords::{
    check_password, check_user_name, create_user, create_user_audited, hash_password, random_secret,
    reset_password_audited, sha256,
};
pub use sessions::{login, logout, session, LoginError, Opened};
pub use tokens::{create_token, NewToken, TokenCache, TOKEN_CACHE_TTL, TOKEN_TRUST_WHILE_DOWN};

use std::fmt;
use std::time::Duration;

use actix_web::http::Method;
use actix_web::{HttpMessage, HttpRequest};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// The session cookie's name (shared with the UI's server functions, which read it too).
pub const SESSION_COOKIE: &str = api::SESSION_COOKIE;
/// The header unsafe session requests repeat the CSRF token in.
pub const CSRF_HEADER: &str = api::CSRF_HEADER;
/// Failed logins in a row before the account is locked.
pub const MAX_FAILED_LOGINS: i32 = 5;
/// How long a locked account stays locked.
pub const LOCK_TIME: Duration = Duration::from_secs(15 * 60);

/// What a person may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything but the audit export.
    Viewer,
    /// Ejects and restores channels, pins health, rebuilds pools.
    Operator,
    /// Edits weights, peak windows, caps, pools, channels, plans, tenants and grants.
    Pm,
    /// Reads everything, exports the audit trail, verifies the chain; writes nothing.
    Auditor,
    /// All of the above, and users and tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Viewer, Role::Operator, Role::Pm, Role::Auditor, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Pm => "pm",
            Self::Auditor => "auditor",
            Self::Admin => "admin",
        }
    }

    /// Parses a role name, naming the field and the choices.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        Self::ALL.into_iter().find(|r| r.as_str() == raw).ok_or_else(|| {
            ApiError::bad_request("role", format!("must be one of viewer, operator, pm, auditor, admin; got {raw:?}"))
        })
    }

    fn allows(self, p: Permission) -> bool {
        use Permission::*;
        match self {
            Self::Admin => p != DataPlane,
            Self::Viewer => matches!(p, Read | Observe),
            Self::Operator => matches!(p, Read | Observe | Operate | Halt),
            Self::Pm => matches!(p, Read | Observe | Edit | Halt),
            Self::Auditor => matches!(p, Read | Observe | AuditExport),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a route asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read configuration, state, health, samples and the audit trail.
    Read,
    /// Export the audit trail and verify its chain.
    AuditExport,
    /// Eject / restore, enable / disable, pin, rebuild.
    Operate,
    /// Change configuration.
    Edit,
    /// Take traffic off a new path: pause, step back or abort a ramp (operators and pms).
    Halt,
    /// Users and API tokens.
    ManageAccess,
    /// Draws, quota operations, outcome reports.
    DataPlane,
    /// The operational endpoints: `/metrics` and `/readyz/details` (every role, admin- and
    /// metrics-scope tokens, the configured admin token; not data-plane tokens).
    Observe,
    /// Any authenticated caller (who am I).
    Any,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::AuditExport => "audit export",
            Self::Operate => "operate",
            Self::Edit => "edit",
            Self::Halt => "halt a ramp",
            Self::ManageAccess => "manage users and tokens",
            Self::DataPlane => "data plane",
            Self::Observe => "read metrics and readiness details",
            Self::Any => "sign in",
        })
    }
}

impl Permission {
    /// Who holds this permission, in words, derived from the roles' and scopes' rules (the
    /// OpenAPI document's 403 answers say it).
    pub fn holders(self) -> String {
        let roles: Vec<&str> = Role::ALL.into_iter().filter(|r| r.allows(self)).map(Role::as_str).collect();
        let mut who = Vec::new();
        match roles.len() {
            0 => {}
            n if n == Role::ALL.len() => who.push("a session (any role)".to_owned()),
            _ => who.push(format!("role {}", roles.join(" or "))),
        }
        for scope in [Scope::Admin, Scope::Dataplane, Scope::Metrics] {
            if scope.allows(self) {
                who.push(format!("a {}-scope API token", scope.as_str()));
            }
        }
        if self != Permission::DataPlane {
            who.push("the configured admin token".to_owned());
        }
        let last = who.pop().unwrap_or_default();
        if who.is_empty() {
            last
        } else {
            format!("{} or {last}", who.join(", "))
        }
    }
}

/// An API token's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Draws, quota operations and outcome reports.
    Dataplane,
    /// Automation of the admin API: reads, operations and edits (not users and tokens).
    Admin,
    /// A scraper: `/metrics` and `/readyz/details` only.
    Metrics,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dataplane => "dataplane",
            Self::Admin => "admin",
            Self::Metrics => "metrics",
        }
    }

    /// The scope stored as `raw`; `None` for a name no version wrote.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Dataplane, Self::Admin, Self::Metrics].into_iter().find(|s| s.as_str() == raw)
    }

    fn allows(self, p: Permission) -> bool {
        match self {
            Self::Dataplane => p == Permission::DataPlane,
            Self::Metrics => p == Permission::Observe,
            Self::Admin => !matches!(p, Permission::ManageAccess | Permission::DataPlane),
        }
    }
}

/// Who is calling, and how they proved it.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The actor audit rows name.
    pub name: String,
    pub via: Via,
}

/// How a caller is authenticated.
#[derive(Debug, Clone)]
pub enum Via {
    /// A login session (the UI): writes are audited with source `ui`.
    Session { role: Role, csrf: String },
    /// An API token, with what it serves (data-plane tokens; admin-scope tokens serve any).
    Token { scope: Scope, bindings: std::sync::Arc<bindings::Bindings> },
    /// The configured admin token.
    Configured,
    /// Development mode: no credentials asked.
    Open,
}

impl Principal {
    /// Whether the caller may do `p`.
    pub fn may(&self, p: Permission) -> bool {
        if p == Permission::Any {
            return true;
        }
        match &self.via {
            Via::Session { role, .. } => role.allows(p),
            Via::Token { scope, .. } => scope.allows(p),
            Via::Configured => !matches!(p, Permission::DataPlane),
            Via::Open => true,
        }
    }

    /// The role or scope, for messages.
    pub fn describe(&self) -> String {
        match &self.via {
            Via::Session { role, .. } => format!("role {role}"),
            Via::Token { scope, .. } => format!("a {} token", scope.as_str()),
            Via::Configured => "the configured admin token".into(),
            Via::Open => "open mode".into(),
        }
    }

    /// 403 naming the resource unless the caller serves `name` of `kind`: a data-plane
    /// token only what it is bound to; anyone else the guard let through, anything.
    pub fn serves(&self, kind: bindings::Resource, name: &str) -> Result<(), ApiError> {
        match &self.via {
            Via::Token { bindings, .. } => bindings.check(kind, name),
            _ => Ok(()),
        }
    }

    /// Whether writes are audited as made through the UI.
    pub fn is_session(&self) -> bool {
        matches!(self.via, Via::Session { .. })
    }

    /// The audit source of the caller's writes: `ui` with a session, `api` otherwise.
    pub fn source(&self) -> crate::audit::store::Source {
        if self.is_session() {
            crate::audit::store::Source::Ui
        } else {
            crate::audit::store::Source::Api
        }
    }
}

/// Audits a change of users, tokens or an account in the change's own transaction, as made
/// by `p` (source `ui` with a session, `api` otherwise).
pub async fn audit_access(
    tx: &mut sqlx::PgConnection,
    req: &HttpRequest,
    p: &Principal,
    entity: &str,
    action: &str,
    before: Option<serde_json::Value>,
    after: serde_json::Value,
) -> Result<(), ApiError> {
    crate::audit::store::insert_audit(
        tx,
        &crate::audit::store::NewAudit {
            actor: &p.name,
            source: p.source(),
            action,
            entity,
            before: before.as_ref(),
            after: Some(&after),
            reason: None,
            request_id: crate::inputs::request_id(req).as_deref(),
        },
    )
    .await?;
    Ok(())
}

/// The caller of a request the guard let through.
pub fn principal(req: &HttpRequest) -> Result<Principal, ApiError> {
    req.extensions().get::<Principal>().cloned().ok_or_else(|| {
        ApiError::Unauthorized("no credentials: sign in, or send an API token as Authorization: Bearer".into())
    })
}

/// What a route needs, by method and matched pattern; `None` for a route that is not
/// under `/api/v1` or needs nothing (health checks, metrics, the UI, login).
pub fn requirement(method: &Method, pattern: &str) -> Option<Permission> {
    use Permission::*;
    // What the server says about itself is for its operators and their scrapers, not the world.
    if pattern == "/metrics" || pattern == "/readyz/details" {
        return Some(Observe);
    }
    if !pattern.starts_with("/api/v1/") {
        return None;
    }
    let get = method == Method::GET || method == Method::HEAD;
    Some(match pattern {
        // Logout only ends the session its cookie names (and SameSite=Strict keeps other
        // sites from sending that cookie), so it needs nothing, and works after expiry.
        "/api/v1/auth/login" | "/api/v1/auth/logout" | "/api/v1/openapi.json" | "/api/v1/reference" => return None,
        // Each checks itself that the caller is a person signed in.
        "/api/v1/auth/me" | "/api/v1/auth/password" | "/api/v1/auth/logout_everywhere" => Any,
        "/api/v1/pools/{pool}/draw"
        | "/api/v1/routes/{route}/draw"
        | "/api/v1/tenants/{tenant}/quota/reserve"
        | "/api/v1/tenants/{tenant}/quota/settle"
        | "/api/v1/tenants/{tenant}/quota/release"
        | "/api/v1/channels/{code}/outcomes" => DataPlane,
        "/api/v1/audit.csv" | "/api/v1/audit/verify" | "/api/v1/break-glass/{id}/acknowledge" => AuditExport,
        p if p.starts_with("/api/v1/users") || p.starts_with("/api/v1/tokens") => ManageAccess,
        _ if get => Read,
        "/api/v1/pools/{pool}/members/{member}/eject"
        | "/api/v1/pools/{pool}/members/{member}/restore"
        | "/api/v1/channels/{code}/disable"
        | "/api/v1/channels/{code}/enable"
        | "/api/v1/channels/{code}/health/pin"
        | "/api/v1/channels/{code}/health/unpin"
        | "/api/v1/pools/{pool}/rebuild" => Operate,
        // Reviewers are checked against the request's policy by the handler.
        "/api/v1/changes/{id}/approve" | "/api/v1/changes/{id}/reject" => Read,
        // Decides without drawing or writing: a read, as the rule tester uses it.
        "/api/v1/routes/{route}/evaluate" => Read,
        // Replays recorded draws through a candidate, writing nothing (bounded in draws).
        "/api/v1/pools/{pool}/replay" => Read,
        "/api/v1/policies/{scope}" => ManageAccess,
        "/api/v1/ramps/{id}/pause" | "/api/v1/ramps/{id}/step_back" | "/api/v1/ramps/{id}/abort" => Halt,
        "/api/v1/pools/{pool}/ramps"
        | "/api/v1/ramps/{id}/promote"
        | "/api/v1/ramps/{id}/promote_to_end"
        | "/api/v1/ramps/{id}/resume" => Edit,
        "/api/v1/changes"
        | "/api/v1/changes/{id}"
        | "/api/v1/changes/{id}/apply"
        | "/api/v1/changes/{id}/schedule"
        | "/api/v1/changes/{id}/cancel" => Edit,
        "/api/v1/pools/{pool}"
        | "/api/v1/pools/{pool}/weights"
        | "/api/v1/pools/{pool}/members"
        | "/api/v1/pools/{pool}/peak_windows"
        | "/api/v1/pools/{pool}/caps"
        | "/api/v1/pools/{pool}/window_caps"
        | "/api/v1/pools/{pool}/health_policy"
        | "/api/v1/pools/{pool}/tier_policy"
        | "/api/v1/pools/{pool}/tier_moves/{id}/accept"
        | "/api/v1/pools/{pool}/tier_moves/{id}/dismiss"
        | "/api/v1/pools/{pool}/restore"
        | "/api/v1/channels"
        | "/api/v1/channels/{code}"
        | "/api/v1/plans"
        | "/api/v1/plans/{plan}"
        | "/api/v1/plans/{plan}/restore"
        | "/api/v1/tenants/{tenant}"
        | "/api/v1/tenants/{tenant}/restore"
        | "/api/v1/tenants/{tenant}/grants"
        | "/api/v1/tenants/{tenant}/grants/{id}/revoke"
        | "/api/v1/routes/{route}"
        | "/api/v1/routes/{route}/restore" => Edit,
        // Anything else: admins only, until it is given a requirement here.
        _ => ManageAccess,
    })
}

pub(crate) fn is_server_fn(path: &str) -> bool {
    path.strip_prefix(app::api::SERVER_FN_PREFIX).is_some_and(|rest| rest.starts_with('/'))
}

/// What a UI server function (under `/sfn`) needs: a signed-in user (permission read),
/// except `whoami`, which the sign-in page asks before anyone is signed in, the audit
/// chain's verification, which needs audit export, and the list of users and tokens,
/// which needs manage access. The functions check again themselves when called during
/// server-side rendering, where no guard runs.
pub fn server_fn_requirement(path: &str) -> Option<Permission> {
    use leptos::server_fn::ServerFn;
    if path == <app::api::session::Whoami as ServerFn>::PATH {
        None
    } else if path == <app::api::audit::VerifyAuditChain as ServerFn>::PATH {
        Some(Permission::AuditExport)
    } else if path == <app::api::access::ListAccess as ServerFn>::PATH {
        Some(Permission::ManageAccess)
    } else {
        Some(Permission::Read)
    }
}
