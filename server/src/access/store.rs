//! The access tables: users, sessions and API tokens. Listings are what admins see, by the
//! REST API and the UI alike (never a password hash or a token's secret or hash).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};

/// A user as an admin sees them.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct UserListing {
    pub name: String,
    /// `viewer`, `operator`, `pm`, `auditor` or `admin`.
    pub role: String,
    pub created_at: DateTime<Utc>,
    pub disabled_at: Option<DateTime<Utc>>,
    /// Set after repeated failed sign-ins; in the past once the lock is over.
    pub locked_until: Option<DateTime<Utc>>,
    /// Has a password (the configured admin token's actor is recorded as a user without one).
    pub can_sign_in: bool,
}

/// An API token as an admin sees it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct TokenListing {
    pub id: i64,
    pub name: String,
    /// The token's first characters, to tell tokens apart.
    pub prefix: String,
    /// `dataplane` or `admin`.
    pub scope: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// What a data-plane token serves: names, or `*` alone.
    pub tenants: Vec<String>,
    pub pools: Vec<String>,
    pub routes: Vec<String>,
    pub channels: Vec<String>,
}

impl From<UserListing> for api::access::User {
    fn from(u: UserListing) -> Self {
        Self {
            name: u.name,
            role: u.role,
            created_at: crate::inputs::rfc3339(u.created_at),
            disabled_at: u.disabled_at.map(crate::inputs::rfc3339),
            locked_until: u.locked_until.map(crate::inputs::rfc3339),
            can_sign_in: u.can_sign_in,
        }
    }
}

impl From<TokenListing> for api::access::ApiToken {
    fn from(t: TokenListing) -> Self {
        Self {
            id: t.id,
            name: t.name,
            prefix: t.prefix,
            scope: t.scope,
            created_by: t.created_by,
            created_at: crate::inputs::rfc3339(t.created_at),
            last_used_at: t.last_used_at.map(crate::inputs::rfc3339),
            revoked_at: t.revoked_at.map(crate::inputs::rfc3339),
            tenants: t.tenants,
            pools: t.pools,
            routes: t.routes,
            channels: t.channels,
        }
    }
}

/// Every user, by name.
#[tracing::instrument(skip_all, err)]
pub async fn list_users(db: &PgPool) -> Result<Vec<UserListing>, sqlx::Error> {
    sqlx::query_as(
        "select name, role, created_at, disabled_at, locked_until, password_hash is not null as can_sign_in
         from app_user order by name",
    )
    .fetch_all(db)
    .await
}

/// Every API token, by id.
#[tracing::instrument(skip_all, err)]
pub async fn list_tokens(db: &PgPool) -> Result<Vec<TokenListing>, sqlx::Error> {
    sqlx::query_as(
        "select id, name, prefix, scope, created_by, created_at, last_used_at, revoked_at,
                tenants, pools, routes, channels
         from api_token order by id",
    )
    .fetch_all(db)
    .await
}

/// Records a user (the admin API's configured actor, demo users) unless it exists.
pub async fn ensure_user(db: &PgPool, name: &str, role: &str) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query("insert into app_user (name, role) values ($1, $2) on conflict (name) do nothing")
        .bind(name)
        .bind(role)
        .execute(db)
        .await?;
    Ok(inserted.rows_affected() == 1)
}

/// Creates a user with a password hash, in the caller's transaction; false when the name
/// exists.
pub async fn insert_user(tx: &mut PgConnection, name: &str, role: &str, hash: &str) -> Result<bool, sqlx::Error> {
    let written = sqlx::query(
        "insert into app_user (name, role, password_hash) values ($1, $2, $3) on conflict (name) do nothing",
    )
    .bind(name)
    .bind(role)
    .bind(hash)
    .execute(tx)
    .await?;
    Ok(written.rows_affected() == 1)
}

/// A sign-in attempt as counted: the user's role, hash and whether they are disabled.
pub struct Attempt {
    pub role: String,
    pub password_hash: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
}

/// Counts a sign-in attempt and decides in one statement whether its password may be
/// checked: `None` for an unknown or locked user. The attempt that reaches `max` in a row
/// locks the account for `lock` as it is counted (before its password is checked), so
/// however many guesses arrive at once, at most `max` passwords are checked per lock
/// period; a success ends the lock ([`open_session`]), and the count starts over when the
/// lock is set.
pub async fn count_attempt(
    db: &PgPool,
    name: &str,
    max: i32,
    lock: std::time::Duration,
) -> Result<Option<Attempt>, sqlx::Error> {
    let row = sqlx::query(
        "update app_user set
           failed_logins = case when failed_logins + 1 >= $2 then 0 else failed_logins + 1 end,
           locked_until = case when failed_logins + 1 >= $2 then now() + $3 * interval '1 second'
                               else locked_until end
         where name = $1 and (locked_until is null or locked_until <= now())
         returning role, password_hash, disabled_at",
    )
    .bind(name)
    .bind(max)
    .bind(lock.as_secs() as f64)
    .fetch_optional(db)
    .await?;
    row.map(|row| {
        Ok(Attempt {
            role: row.try_get("role")?,
            password_hash: row.try_get("password_hash")?,
            disabled_at: row.try_get("disabled_at")?,
        })
    })
    .transpose()
}

/// Until when a user is locked out, if they exist and ever were.
pub async fn locked_until(db: &PgPool, name: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    Ok(sqlx::query_scalar("select locked_until from app_user where name = $1")
        .bind(name)
        .fetch_optional(db)
        .await?
        .flatten())
}

/// Opens a session after a good password: resets the failures, stores the session by the
/// hash of its id, and removes expired sessions; one transaction.
pub async fn open_session(
    db: &PgPool,
    name: &str,
    id_hash: &[u8],
    csrf_token: &str,
    expires_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("update app_user set failed_logins = 0, locked_until = null where name = $1")
        .bind(name)
        .execute(&mut *tx)
        .await?;
    sqlx::query("insert into user_session (id_hash, user_name, csrf_token, expires_at) values ($1, $2, $3, $4)")
        .bind(id_hash)
        .bind(name)
        .bind(csrf_token)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
    // Expired sessions go as new ones come.
    sqlx::query("delete from user_session where expires_at < now()").execute(&mut *tx).await?;
    tx.commit().await
}

/// Ends a session, by the hash of its id.
pub async fn delete_session(db: &PgPool, id_hash: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query("delete from user_session where id_hash = $1").bind(id_hash).execute(db).await?;
    Ok(())
}

/// A live session (not expired, used within `idle`, user not disabled), recording its use:
/// the user's name, role and the session's CSRF token.
pub async fn use_session(
    db: &PgPool,
    id_hash: &[u8],
    idle: std::time::Duration,
) -> Result<Option<(String, String, String)>, sqlx::Error> {
    sqlx::query_as(
        "update user_session s set last_seen_at = now() from app_user u
         where s.id_hash = $1 and s.expires_at > now() and s.last_seen_at > now() - $2 * interval '1 second'
           and u.name = s.user_name and u.disabled_at is null
         returning u.name, u.role, s.csrf_token",
    )
    .bind(id_hash)
    .bind(idle.as_secs() as f64)
    .fetch_optional(db)
    .await
}

/// Replaces a user's password hash, ends any lock-out and their sessions but `keep` (the
/// one that changed it, by the hash of its id): how many sessions ended, `None` for an
/// unknown user.
pub async fn set_password(
    tx: &mut PgConnection,
    name: &str,
    hash: &str,
    keep: Option<&[u8]>,
) -> Result<Option<u64>, sqlx::Error> {
    let done = sqlx::query(
        "update app_user set password_hash = $2, failed_logins = 0, locked_until = null, updated_at = now()
         where name = $1",
    )
    .bind(name)
    .bind(hash)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    Ok(Some(end_sessions(tx, name, keep).await?))
}

/// Ends every session of a user but `keep` (by the hash of its id); how many ended.
pub async fn end_sessions(tx: &mut PgConnection, name: &str, keep: Option<&[u8]>) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("delete from user_session where user_name = $1 and ($2::bytea is null or id_hash <> $2)")
        .bind(name)
        .bind(keep)
        .execute(tx)
        .await?;
    Ok(done.rows_affected())
}

/// Stores a new API token by its hash with what it serves; its id.
pub async fn insert_token(
    tx: &mut PgConnection,
    name: &str,
    prefix: &str,
    hash: &[u8],
    scope: &str,
    created_by: &str,
    bound: &api::access::TokenBindings,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "insert into api_token (name, prefix, hash, scope, created_by, tenants, pools, routes, channels)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9) returning id",
    )
    .bind(name)
    .bind(prefix)
    .bind(hash)
    .bind(scope)
    .bind(created_by)
    .bind(&bound.tenants)
    .bind(&bound.pools)
    .bind(&bound.routes)
    .bind(&bound.channels)
    .fetch_one(tx)
    .await
}

/// A live API token as verified: id, name, scope and what it serves.
#[derive(sqlx::FromRow)]
pub struct LiveToken {
    pub id: i64,
    pub name: String,
    pub scope: String,
    pub tenants: Vec<String>,
    pub pools: Vec<String>,
    pub routes: Vec<String>,
    pub channels: Vec<String>,
}

/// A live API token by its hash, recording its use.
pub async fn use_token(db: &PgPool, hash: &[u8]) -> Result<Option<LiveToken>, sqlx::Error> {
    sqlx::query_as(
        "update api_token set last_used_at = now() where hash = $1 and revoked_at is null
         returning id, name, scope, tenants, pools, routes, channels",
    )
    .bind(hash)
    .fetch_optional(db)
    .await
}

/// A live token's scope (locked for the transaction), `None` when there is no live token
/// with that id.
pub async fn live_token_scope(tx: &mut PgConnection, id: i64) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("select scope from api_token where id = $1 and revoked_at is null for update")
        .bind(id)
        .fetch_optional(tx)
        .await
}

/// A token's tenants, pools, routes and channels, as stored.
type BindingLists = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// Replaces what a live token serves; its hash (for the caches) and the lists before, or
/// `None` when there is no live token with that id.
pub async fn set_bindings(
    tx: &mut PgConnection,
    id: i64,
    bound: &api::access::TokenBindings,
) -> Result<Option<(Vec<u8>, api::access::TokenBindings)>, sqlx::Error> {
    let before: Option<BindingLists> = sqlx::query_as(
        "select tenants, pools, routes, channels from api_token where id = $1 and revoked_at is null for update",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((tenants, pools, routes, channels)) = before else { return Ok(None) };
    let hash: Vec<u8> = sqlx::query_scalar(
        "update api_token set tenants = $2, pools = $3, routes = $4, channels = $5 where id = $1 returning hash",
    )
    .bind(id)
    .bind(&bound.tenants)
    .bind(&bound.pools)
    .bind(&bound.routes)
    .bind(&bound.channels)
    .fetch_one(&mut *tx)
    .await?;
    Ok(Some((hash, api::access::TokenBindings { tenants, pools, routes, channels })))
}

/// Sets a user's role; false for an unknown user.
pub async fn set_role(tx: &mut PgConnection, name: &str, role: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("update app_user set role = $2, updated_at = now() where name = $1")
        .bind(name)
        .bind(role)
        .execute(tx)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Disables a user and ends their sessions; false when there is no enabled user by that
/// name.
pub async fn disable_user(tx: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update app_user set disabled_at = now(), updated_at = now() where name = $1 and disabled_at is null",
    )
    .bind(name)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("delete from user_session where user_name = $1").bind(name).execute(&mut *tx).await?;
    Ok(true)
}

/// Enables a disabled user again; false when there is no disabled user by that name.
pub async fn enable_user(tx: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update app_user set disabled_at = null, updated_at = now() where name = $1 and disabled_at is not null",
    )
    .bind(name)
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Ends a lock-out and starts the count over; false for an unknown user.
pub async fn unlock_user(tx: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let done =
        sqlx::query("update app_user set locked_until = null, failed_logins = 0, updated_at = now() where name = $1")
            .bind(name)
            .execute(tx)
            .await?;
    Ok(done.rows_affected() == 1)
}

/// Revokes a live token; its hash (for the caches), or `None` when there is no live token
/// with that id.
pub async fn revoke_token(tx: &mut PgConnection, id: i64) -> Result<Option<Vec<u8>>, sqlx::Error> {
    sqlx::query_scalar("update api_token set revoked_at = now() where id = $1 and revoked_at is null returning hash")
        .bind(id)
        .fetch_optional(tx)
        .await
}
