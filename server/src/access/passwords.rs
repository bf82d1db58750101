//! Passwords (argon2id, hashed off the async workers, a few at a time), secrets, the user
//! name rule, and creating users.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::Engine;
use sha2::Digest;
use sqlx::PgPool;

use super::{store, Role};
use crate::error::ApiError;

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

pub(crate) fn verify_password(password: &str, phc: &str) -> bool {
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
    api::UserName::parse(name).map(drop).map_err(|e| ApiError::bad_request(e.field, e.rule))
}

/// At most this many password hashes are computed at once (each takes ~19 MiB and tens of
/// milliseconds of CPU); they run off the async workers, so a flood of sign-ins cannot
/// stall draws.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

/// Runs a password hash or check on the blocking pool, a few at a time.
pub(crate) async fn off_the_workers<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
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
    if !store::insert_user(tx, name, role.as_str(), &hash).await? {
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
    let mut tx = db.begin().await?;
    create_user(&mut tx, name, role, password).await?;
    audit_user(&mut tx, actor, "user.create", name, &serde_json::json!({"role": role})).await?;
    tx.commit().await?;
    Ok(())
}

/// The audit row of a change to user `name` made from the command line or a seed (source
/// `system`, no reason or request id): `after` says what changed.
async fn audit_user(
    tx: &mut sqlx::PgConnection,
    actor: &str,
    action: &str,
    name: &str,
    after: &serde_json::Value,
) -> Result<(), ApiError> {
    crate::audit::store::insert_audit(
        tx,
        &crate::audit::store::NewAudit {
            actor,
            source: crate::audit::store::Source::System,
            action,
            entity: &format!("user:{name}"),
            before: None,
            after: Some(after),
            reason: None,
            request_id: None,
        },
    )
    .await?;
    Ok(())
}

/// Sets a user's password from the command line (`tessera user reset-password`): the hash,
/// the end of any lock-out and of every session of theirs, with `enable` a disabled user
/// enabled again, and the audit rows (`user.password`, and `user.enable` when that
/// happened, by `actor`), in one transaction. How many sessions ended and whether the user
/// was enabled; a 404 for an unknown user.
pub async fn reset_password_audited(
    db: &PgPool,
    name: &str,
    password: &str,
    enable: bool,
    actor: &str,
) -> Result<(u64, bool), ApiError> {
    check_user_name(name)?;
    check_password(password)?;
    let owned = password.to_owned();
    let hash = off_the_workers(move || hash_password(&owned)).await?;
    let mut tx = db.begin().await?;
    let Some(ended) = store::set_password(&mut tx, name, &hash, None).await? else {
        return Err(ApiError::NotFound(format!("unknown user {name:?}")));
    };
    let enabled = enable && store::enable_user(&mut tx, name).await?;
    let changed_by = serde_json::json!({"changed_by": actor});
    let actions: &[&str] = if enabled { &["user.password", "user.enable"] } else { &["user.password"] };
    for action in actions {
        audit_user(&mut tx, actor, action, name, &changed_by).await?;
    }
    tx.commit().await?;
    Ok((ended, enabled))
}
