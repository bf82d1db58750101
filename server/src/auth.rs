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

use std::fmt;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, ResponseError};
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::Engine;
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use sqlx::{PgPool, Row};

use crate::error::ApiError;
use crate::state::AppState;

/// The session cookie's name (shared with the UI's server functions, which read it too).
pub const SESSION_COOKIE: &str = app::api::SESSION_COOKIE;
/// The header unsafe session requests repeat the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
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
            Self::Viewer => matches!(p, Read),
            Self::Operator => matches!(p, Read | Operate),
            Self::Pm => matches!(p, Read | Edit),
            Self::Auditor => matches!(p, Read | AuditExport),
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
    /// Users and API tokens.
    ManageAccess,
    /// Draws, quota operations, outcome reports.
    DataPlane,
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
            Self::ManageAccess => "manage users and tokens",
            Self::DataPlane => "data plane",
            Self::Any => "sign in",
        })
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
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dataplane => "dataplane",
            Self::Admin => "admin",
        }
    }

    fn allows(self, p: Permission) -> bool {
        match self {
            Self::Dataplane => p == Permission::DataPlane,
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
    /// An API token.
    Token { scope: Scope },
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
            Via::Token { scope } => scope.allows(p),
            Via::Configured => !matches!(p, Permission::DataPlane),
            Via::Open => true,
        }
    }

    /// The role or scope, for messages.
    pub fn describe(&self) -> String {
        match &self.via {
            Via::Session { role, .. } => format!("role {role}"),
            Via::Token { scope } => format!("a {} token", scope.as_str()),
            Via::Configured => "the configured admin token".into(),
            Via::Open => "open mode".into(),
        }
    }

    /// Whether writes are audited as made through the UI.
    pub fn is_session(&self) -> bool {
        matches!(self.via, Via::Session { .. })
    }

    /// The audit source of the caller's writes: `ui` with a session, `api` otherwise.
    pub fn source(&self) -> crate::db::audit::Source {
        if self.is_session() {
            crate::db::audit::Source::Ui
        } else {
            crate::db::audit::Source::Api
        }
    }
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
    if !pattern.starts_with("/api/v1/") {
        return None;
    }
    let get = method == Method::GET || method == Method::HEAD;
    Some(match pattern {
        // Logout only ends the session its cookie names (and SameSite=Strict keeps other
        // sites from sending that cookie), so it needs nothing, and works after expiry.
        "/api/v1/auth/login" | "/api/v1/auth/logout" | "/api/v1/openapi.json" => return None,
        "/api/v1/auth/me" => Any,
        "/api/v1/pools/{pool}/draw"
        | "/api/v1/tenants/{tenant}/quota/reserve"
        | "/api/v1/tenants/{tenant}/quota/settle"
        | "/api/v1/tenants/{tenant}/quota/release"
        | "/api/v1/channels/{code}/outcomes" => DataPlane,
        "/api/v1/audit.csv" | "/api/v1/audit/verify" => AuditExport,
        p if p.starts_with("/api/v1/users") || p.starts_with("/api/v1/tokens") => ManageAccess,
        _ if get => Read,
        "/api/v1/pools/{pool}/members/{member}/eject"
        | "/api/v1/pools/{pool}/members/{member}/restore"
        | "/api/v1/channels/{code}/disable"
        | "/api/v1/channels/{code}/enable"
        | "/api/v1/channels/{code}/health/pin"
        | "/api/v1/channels/{code}/health/unpin"
        | "/api/v1/pools/{pool}/rebuild" => Operate,
        "/api/v1/pools/{pool}"
        | "/api/v1/pools/{pool}/weights"
        | "/api/v1/pools/{pool}/members"
        | "/api/v1/pools/{pool}/peak_windows"
        | "/api/v1/pools/{pool}/caps"
        | "/api/v1/pools/{pool}/health_policy"
        | "/api/v1/channels"
        | "/api/v1/channels/{code}"
        | "/api/v1/plans"
        | "/api/v1/plans/{plan}"
        | "/api/v1/tenants/{tenant}"
        | "/api/v1/tenants/{tenant}/grants"
        | "/api/v1/tenants/{tenant}/grants/{id}/revoke" => Edit,
        // Anything else: admins only, until it is given a requirement here.
        _ => ManageAccess,
    })
}

fn is_server_fn(path: &str) -> bool {
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

pub fn sha256(raw: &str) -> Vec<u8> {
    sha2::Sha256::digest(raw.as_bytes()).to_vec()
}

/// A secret from the operating system's randomness: `bytes` random bytes, base64url.
pub fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the operating system's randomness is available");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}

/// An argon2id PHC string for `password`.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("hashing: {e}"))?
        .to_string())
}

fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|hash| Argon2::default().verify_password(password.as_bytes(), &hash).is_ok())
}

/// A password's rules: 12..=256 characters.
pub fn check_password(password: &str) -> Result<(), ApiError> {
    let n = password.chars().count();
    if !(12..=256).contains(&n) {
        return Err(ApiError::bad_request("password", format!("must be 12..=256 characters, got {n}")));
    }
    Ok(())
}

/// A user name's rules (as the table checks them): 1..=64 of `[A-Za-z0-9_.@-]`.
pub fn check_user_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c)) {
        return Err(ApiError::bad_request("name", "must be 1..=64 of ASCII letters, digits, '_', '.', '@', '-'"));
    }
    Ok(())
}

/// At most this many password hashes are computed at once (each takes ~19 MiB and tens of
/// milliseconds of CPU); they run off the async workers, so a flood of sign-ins cannot
/// stall draws.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// Runs a password hash or check on the blocking pool, a few at a time.
async fn off_the_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let _permit = HASHING.acquire().await.expect("the hashing semaphore is never closed");
    tokio::task::spawn_blocking(work).await.expect("password hashing does not panic")
}

/// Creates a user, in the caller's transaction; refuses a name that exists (also the
/// configured admin token's actor, which is recorded as a user without a password: that
/// name stays the token's).
pub async fn create_user(tx: &mut sqlx::PgConnection, name: &str, role: Role, password: &str) -> Result<(), ApiError> {
    check_user_name(name)?;
    check_password(password)?;
    let owned = password.to_owned();
    let hash = off_the_workers(move || hash_password(&owned)).await?;
    let written = sqlx::query(
        "insert into app_user (name, role, password_hash) values ($1, $2, $3) on conflict (name) do nothing",
    )
    .bind(name)
    .bind(role.as_str())
    .bind(hash)
    .execute(tx)
    .await
    .map_err(crate::routes::audit::db_error)?;
    if written.rows_affected() == 0 {
        return Err(ApiError::Duplicate { field: "name".into(), rule: format!("user {name:?} exists") });
    }
    Ok(())
}

/// Creates a user and its audit row (`user.create`) in one transaction, for the command
/// line and the demo seed.
pub async fn create_user_audited(
    db: &PgPool,
    name: &str,
    role: Role,
    password: &str,
    actor: &str,
) -> Result<(), ApiError> {
    let mut tx = db.begin().await.map_err(crate::routes::audit::db_error)?;
    create_user(&mut tx, name, role, password).await?;
    let after = serde_json::json!({"role": role});
    crate::db::audit::insert_audit(
        &mut tx,
        &crate::db::audit::NewAudit {
            actor,
            source: crate::db::audit::Source::System,
            action: "user.create",
            entity: &format!("user:{name}"),
            before: None,
            after: Some(&after),
            reason: None,
            request_id: None,
        },
    )
    .await
    .map_err(crate::routes::audit::db_error)?;
    tx.commit().await.map_err(crate::routes::audit::db_error)?;
    Ok(())
}

/// Why a login failed. The caller answers both alike (no user enumeration, no oracle).
#[derive(Debug)]
pub enum LoginError {
    Invalid,
    Locked { until: DateTime<Utc> },
    Db(sqlx::Error),
}

/// A session just opened.
#[derive(Debug, Serialize)]
pub struct Opened {
    #[serde(skip)]
    pub session_id: String,
    pub user: String,
    pub role: Role,
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

/// A hash to check against when there is none (unknown name, no password), so every
/// failure costs the same.
static DUMMY_HASH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| hash_password("not a password of anyone").expect("hashing works"));

/// Checks a password and opens a session. The attempt is counted before the password is
/// checked (atomically, so parallel guesses cannot exceed the limit); at
/// [`MAX_FAILED_LOGINS`] failures in a row the account is locked for [`LOCK_TIME`] and the
/// count starts over; a success resets it. While locked the password is not checked.
pub async fn login(db: &PgPool, name: &str, password: &str, ttl: Duration) -> Result<Opened, LoginError> {
    let well_formed = check_user_name(name).is_ok() && !password.contains('\0');
    let attempt = if well_formed {
        sqlx::query(
            "update app_user set failed_logins = failed_logins + 1
             where name = $1 and (locked_until is null or locked_until <= now())
             returning role, password_hash, failed_logins, disabled_at",
        )
        .bind(name)
        .fetch_optional(db)
        .await
        .map_err(LoginError::Db)?
    } else {
        None
    };
    let Some(row) = attempt else {
        // Unknown, malformed or locked: spend the time a real check takes, answer alike.
        let owned = password.to_owned();
        off_the_workers(move || verify_password(&owned, &DUMMY_HASH)).await;
        let locked: Option<DateTime<Utc>> = if well_formed {
            sqlx::query_scalar("select locked_until from app_user where name = $1")
                .bind(name)
                .fetch_optional(db)
                .await
                .map_err(LoginError::Db)?
                .flatten()
        } else {
            None
        };
        return Err(match locked {
            Some(until) => LoginError::Locked { until },
            None => LoginError::Invalid,
        });
    };
    let hash: Option<String> = row.try_get("password_hash").map_err(LoginError::Db)?;
    let disabled: Option<DateTime<Utc>> = row.try_get("disabled_at").map_err(LoginError::Db)?;
    let failures: i32 = row.try_get("failed_logins").map_err(LoginError::Db)?;
    let owned = password.to_owned();
    let checked = hash.unwrap_or_else(|| DUMMY_HASH.clone());
    let ok = off_the_workers(move || verify_password(&owned, &checked)).await && disabled.is_none();
    if !ok {
        if failures >= MAX_FAILED_LOGINS {
            sqlx::query("update app_user set failed_logins = 0, locked_until = now() + $2 * interval '1 second' where name = $1")
                .bind(name)
                .bind(LOCK_TIME.as_secs() as f64)
                .execute(db)
                .await
                .map_err(LoginError::Db)?;
        }
        return Err(LoginError::Invalid);
    }
    let role =
        Role::parse(&row.try_get::<String, _>("role").map_err(LoginError::Db)?).map_err(|_| LoginError::Invalid)?;
    let session_id = random_secret(32);
    let csrf_token = random_secret(24);
    let expires_at = Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(12));
    let mut tx = db.begin().await.map_err(LoginError::Db)?;
    sqlx::query("update app_user set failed_logins = 0, locked_until = null where name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(LoginError::Db)?;
    sqlx::query("insert into user_session (id_hash, user_name, csrf_token, expires_at) values ($1, $2, $3, $4)")
        .bind(sha256(&session_id))
        .bind(name)
        .bind(&csrf_token)
        .bind(expires_at)
        .execute(&mut *tx)
        .await
        .map_err(LoginError::Db)?;
    // Expired sessions go as new ones come.
    sqlx::query("delete from user_session where expires_at < now()").execute(&mut *tx).await.map_err(LoginError::Db)?;
    tx.commit().await.map_err(LoginError::Db)?;
    Ok(Opened { session_id, user: name.to_owned(), role, csrf_token, expires_at })
}

/// Ends a session.
pub async fn logout(db: &PgPool, session_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("delete from user_session where id_hash = $1").bind(sha256(session_id)).execute(db).await?;
    Ok(())
}

/// The principal of a live session (not expired, user not disabled); records its use.
pub async fn session(db: &PgPool, session_id: &str) -> Result<Option<Principal>, sqlx::Error> {
    let row = sqlx::query(
        "update user_session s set last_seen_at = now() from app_user u
         where s.id_hash = $1 and s.expires_at > now() and u.name = s.user_name and u.disabled_at is null
         returning u.name, u.role, s.csrf_token",
    )
    .bind(sha256(session_id))
    .fetch_optional(db)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let role: String = row.try_get("role")?;
    let Ok(role) = Role::parse(&role) else { return Ok(None) };
    Ok(Some(Principal { name: row.try_get("name")?, via: Via::Session { role, csrf: row.try_get("csrf_token")? } }))
}

/// An API token just created: the secret is shown once.
#[derive(Debug, Serialize)]
pub struct NewToken {
    pub id: i64,
    pub name: String,
    pub scope: Scope,
    pub token: String,
}

/// Creates an API token; only its hash is kept.
pub async fn create_token(
    tx: &mut sqlx::PgConnection,
    name: &str,
    scope: Scope,
    created_by: &str,
) -> Result<NewToken, ApiError> {
    if name.trim().is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.@ -".contains(c))
    {
        return Err(ApiError::bad_request(
            "name",
            "must be 1..=64 of ASCII letters, digits, space, '_', '.', '@', '-'",
        ));
    }
    let token = format!("tsr_{}", random_secret(32));
    let id: i64 = sqlx::query_scalar(
        "insert into api_token (name, prefix, hash, scope, created_by) values ($1, $2, $3, $4, $5) returning id",
    )
    .bind(name)
    .bind(&token[..10])
    .bind(sha256(&token))
    .bind(scope.as_str())
    .bind(created_by)
    .fetch_one(tx)
    .await
    .map_err(crate::routes::audit::db_error)?;
    Ok(NewToken { id, name: name.to_owned(), scope, token })
}

/// How long a verified API token is trusted without asking Postgres again (per instance).
/// A revocation reaches the instance that made it at once, the others within this time.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);

/// How long a token verified once is still trusted while Postgres cannot be asked.
pub const TOKEN_TRUST_WHILE_DOWN: Duration = Duration::from_secs(3600);

/// API tokens verified recently, by hash: the data plane does not query Postgres on every
/// request, and keeps serving callers it has verified while Postgres is unreachable.
#[derive(Clone, Default)]
pub struct TokenCache(
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Vec<u8>, (Principal, std::time::Instant)>>>,
);

impl TokenCache {
    /// Forgets one token (after its revocation), by its SHA-256.
    pub fn remove(&self, hash: &[u8]) {
        self.0.lock().expect("token cache").remove(hash);
    }

    /// The cached principal and whether it is fresh; entries older than
    /// [`TOKEN_TRUST_WHILE_DOWN`] are not returned at all.
    fn get(&self, hash: &[u8]) -> Option<(Principal, bool)> {
        let cache = self.0.lock().expect("token cache");
        cache
            .get(hash)
            .filter(|(_, at)| at.elapsed() < TOKEN_TRUST_WHILE_DOWN)
            .map(|(p, at)| (p.clone(), at.elapsed() < TOKEN_CACHE_TTL))
    }

    fn put(&self, hash: Vec<u8>, principal: Principal) {
        let mut cache = self.0.lock().expect("token cache");
        if cache.len() >= 10_000 {
            cache.clear();
        }
        cache.insert(hash, (principal, std::time::Instant::now()));
    }
}

/// Verifies an API token: from the cache while fresh; otherwise from Postgres (which also
/// records its last use); when Postgres cannot be reached, from the cache (for at most
/// [`TOKEN_TRUST_WHILE_DOWN`] after the last verification).
async fn verify_token(state: &AppState, raw: &str) -> Result<Option<Principal>, sqlx::Error> {
    let hash = sha256(raw);
    let cached = state.tokens.get(&hash);
    if let Some((p, true)) = &cached {
        return Ok(Some(p.clone()));
    }
    match token(&state.db, raw).await {
        Ok(Some(p)) => {
            state.tokens.put(hash, p.clone());
            Ok(Some(p))
        }
        Ok(None) => {
            // Revoked (or never known): never served from the cache again.
            state.tokens.remove(&hash);
            Ok(None)
        }
        // Only when Postgres cannot be reached; any other error is an error.
        Err(e) if !crate::routes::audit::is_unavailable(&e) => Err(e),
        Err(e) => match cached {
            Some((p, _)) => {
                tracing::warn!(error = %e, "postgres unreachable: trusting a token verified earlier");
                Ok(Some(p))
            }
            None => Err(e),
        },
    }
}

async fn token(db: &PgPool, raw: &str) -> Result<Option<Principal>, sqlx::Error> {
    let row = sqlx::query(
        "update api_token set last_used_at = now() where hash = $1 and revoked_at is null returning id, name, scope",
    )
    .bind(sha256(raw))
    .fetch_optional(db)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let scope = match row.try_get::<String, _>("scope")?.as_str() {
        "admin" => Scope::Admin,
        _ => Scope::Dataplane,
    };
    let name: String = row.try_get("name")?;
    let id: i64 = row.try_get("id")?;
    Ok(Some(Principal { name: format!("token:{id}:{name}"), via: Via::Token { scope } }))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_value<'r>(req: &'r ServiceRequest, name: &str) -> Option<String> {
    req.cookie(name).map(|c| c.value().to_owned())
}

/// Whether an unsafe request made with a session cookie comes from this site: its Origin
/// (or, without one, its Referer) names the host the request was sent to.
fn same_origin(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("");
    let source = headers
        .get("origin")
        .or_else(|| headers.get("referer"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok());
    match source {
        Some(url) => {
            let origin_host = match url.port() {
                Some(port) => format!("{}:{port}", url.host_str().unwrap_or("")),
                None => url.host_str().unwrap_or("").to_owned(),
            };
            !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
        }
        None => false,
    }
}

async fn identify(req: &ServiceRequest, state: &AppState) -> Result<Option<Principal>, ApiError> {
    if state.auth.open {
        return Ok(Some(Principal { name: "open-mode".into(), via: Via::Open }));
    }
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    if let Some(given) = bearer {
        if let Some(admin) = &state.admin {
            if constant_time_eq(given.as_bytes(), admin.token.expose_secret().as_bytes()) {
                return Ok(Some(Principal { name: admin.actor.clone(), via: Via::Configured }));
            }
        }
        return match verify_token(state, given).await.map_err(crate::routes::audit::db_error)? {
            Some(p) => Ok(Some(p)),
            None => Err(ApiError::Unauthorized("the bearer token is unknown or revoked".into())),
        };
    }
    if let Some(id) = cookie_value(req, SESSION_COOKIE) {
        let found = session(&state.db, &id).await.map_err(crate::routes::audit::db_error)?;
        let Some(p) = found else {
            return Err(ApiError::Unauthorized("the session has expired or ended: sign in again".into()));
        };
        if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            // A cross-site form cannot read the CSRF token, and cannot claim our origin.
            if !same_origin(req) {
                return Err(ApiError::Forbidden(
                    "cross-origin request refused: unsafe requests with a session must come from this site".into(),
                ));
            }
            let Via::Session { csrf, .. } = &p.via else { unreachable!("a session principal") };
            let given = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !constant_time_eq(given.as_bytes(), csrf.as_bytes()) {
                return Err(ApiError::Forbidden(format!(
                    "missing or wrong {CSRF_HEADER} header (the CSRF token given at sign-in)"
                )));
            }
        }
        return Ok(Some(p));
    }
    Ok(None)
}

/// The guard in front of every route: finds the route's requirement, identifies the
/// caller, and answers 401 (no or bad credentials) or 403 (not allowed) before the
/// handler runs. The caller is left in the request's extensions for the handler.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // Decide on the path the router routes by: percent-decoded (all but %, / and +), so
    // `/api/v%31/users` is judged as the `/api/v1/users` it reaches, never as a stranger.
    let path = req.match_info().as_str().to_owned();
    let pattern = req.resource_map().match_pattern(&path);
    let needed = match pattern.as_deref() {
        _ if is_server_fn(&path) => server_fn_requirement(&path),
        Some(p) => requirement(req.method(), p),
        // Unmatched paths under the API: admins only (they 404 after the guard).
        None if path.starts_with("/api/") || req.path().starts_with("/api/") => Some(Permission::ManageAccess),
        None => None,
    };
    let Some(needed) = needed else {
        return next.call(req).await.map(ServiceResponse::map_into_boxed_body);
    };
    let Some(state) = req.app_data::<actix_web::web::Data<AppState>>().cloned() else {
        return next.call(req).await.map(ServiceResponse::map_into_boxed_body);
    };
    let refuse = |req: ServiceRequest, e: ApiError| Ok(req.into_response(e.error_response()));
    let principal = match identify(&req, &state).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return refuse(
                req,
                ApiError::Unauthorized("no credentials: sign in, or send an API token as Authorization: Bearer".into()),
            );
        }
        Err(e) => return refuse(req, e),
    };
    if !principal.may(needed) {
        let e = ApiError::Forbidden(format!("{} may not {needed} ({} {path})", principal.describe(), req.method()));
        return refuse(req, e);
    }
    req.extensions_mut().insert(principal);
    next.call(req).await.map(ServiceResponse::map_into_boxed_body)
}
