//! Users and API tokens as listed to admins, by the REST API and the UI alike (never a
//! password hash or a token's secret or hash).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

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
        "select id, name, prefix, scope, created_by, created_at, last_used_at, revoked_at from api_token order by id",
    )
    .fetch_all(db)
    .await
}
