//! Sign-in with throttling and lock-out, sign-out, and the live session behind a cookie.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::passwords::{check_user_name, hash_password, off_the_workers, random_secret, sha256, verify_password};
use super::{store, Principal, Role, Via, LOCK_TIME, MAX_FAILED_LOGINS};

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
/// failure costs the same. Its phrase is random per process: nothing typed can match it,
/// and a match would not count anyway ([`login`] never accepts a user without a hash).
static DUMMY_HASH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| hash_password(&random_secret(32)).expect("hashing works"));

/// Checks a password and opens a session. The attempt is counted and decided before the
/// password is checked, in one statement ([`store::count_attempt`]): the attempt that
/// makes [`MAX_FAILED_LOGINS`] in a row locks the account for [`LOCK_TIME`], so at most
/// that many passwords are checked per lock period whatever the parallelism; a success
/// ends the lock and resets the count. While locked the password is not checked. A user
/// without a password hash (the configured admin token's actor, a user recorded by a
/// seed) never signs in: their attempt is checked against the dummy hash for equal
/// timing and refused whatever the result.
pub async fn login(db: &PgPool, name: &str, password: &str, ttl: Duration) -> Result<Opened, LoginError> {
    let well_formed = check_user_name(name).is_ok() && !password.contains('\0');
    let attempt = if well_formed {
        store::count_attempt(db, name, MAX_FAILED_LOGINS, LOCK_TIME).await.map_err(LoginError::Db)?
    } else {
        None
    };
    let Some(row) = attempt else {
        // Unknown, malformed or locked: spend the time a real check takes, answer alike.
        let owned = password.to_owned();
        off_the_workers(move || verify_password(&owned, &DUMMY_HASH)).await;
        let locked: Option<DateTime<Utc>> =
            if well_formed { store::locked_until(db, name).await.map_err(LoginError::Db)? } else { None };
        return Err(match locked.filter(|until| *until > Utc::now()) {
            Some(until) => LoginError::Locked { until },
            None => LoginError::Invalid,
        });
    };
    let store::Attempt { role, password_hash: hash, disabled_at: disabled } = row;
    let owned = password.to_owned();
    let has_password = hash.is_some();
    let checked = hash.unwrap_or_else(|| DUMMY_HASH.clone());
    let verified = off_the_workers(move || verify_password(&owned, &checked)).await;
    if !(verified && has_password && disabled.is_none()) {
        return Err(LoginError::Invalid);
    }
    let role = Role::parse(&role).map_err(|_| LoginError::Invalid)?;
    let session_id = random_secret(32);
    let csrf_token = random_secret(24);
    let expires_at = Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::hours(12));
    store::open_session(db, name, &sha256(&session_id), &csrf_token, expires_at).await.map_err(LoginError::Db)?;
    Ok(Opened { session_id, user: name.to_owned(), role, csrf_token, expires_at })
}

/// Ends a session.
pub async fn logout(db: &PgPool, session_id: &str) -> Result<(), sqlx::Error> {
    store::delete_session(db, &sha256(session_id)).await
}

/// The principal of a live session (not expired, used within `idle`, user not disabled);
/// records its use.
pub async fn session(db: &PgPool, session_id: &str, idle: Duration) -> Result<Option<Principal>, sqlx::Error> {
    let row = store::use_session(db, &sha256(session_id), idle).await?;
    let Some((name, role, csrf)) = row else { return Ok(None) };
    let Ok(role) = Role::parse(&role) else { return Ok(None) };
    Ok(Some(Principal { name, via: Via::Session { role, csrf } }))
}
