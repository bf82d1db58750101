//! API tokens: created with a scope (only their hash is kept), verified with a short cache
//! that also carries the data plane through a Postgres outage.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use super::bindings::Bindings;
use super::passwords::{random_secret, sha256};
use super::{store, Principal, Scope, Via};
use crate::error::ApiError;
use crate::state::AppState;

/// An API token just created: the secret is shown once.
#[derive(Debug, Serialize)]
pub struct NewToken {
    pub id: i64,
    pub name: String,
    pub scope: Scope,
    pub token: String,
    /// What it serves, as stored.
    pub bindings: api::access::TokenBindings,
}

/// Creates an API token serving what `bound` names (checked here; an admin-scope token
/// serves no data plane and is stored with `*`); only its hash is kept.
pub async fn create_token(
    tx: &mut sqlx::PgConnection,
    name: &str,
    scope: Scope,
    bound: &api::access::TokenBindings,
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
    let bindings = Bindings::parse(bound)?;
    if scope != Scope::Dataplane && bindings != Bindings::any() {
        return Err(ApiError::bad_request(
            "scope",
            format!("a {}-scope token reaches no data plane: bind only dataplane tokens", scope.as_str()),
        ));
    }
    let token = format!("tsr_{}", random_secret(32));
    let bindings = bindings.body();
    let id =
        store::insert_token(tx, name, &token[..10], &sha256(&token), scope.as_str(), created_by, &bindings).await?;
    Ok(NewToken { id, name: name.to_owned(), scope, token, bindings })
}

/// How long a verified API token is trusted without asking Postgres again (per instance).
/// A revocation reaches the instance that made it at once, the others within this time.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(10);

/// How long a token verified once is still trusted while Postgres cannot be asked.
pub const TOKEN_TRUST_WHILE_DOWN: Duration = Duration::from_secs(3600);

/// API tokens verified recently, by hash: the data plane does not query Postgres on every
/// request, and keeps serving callers it has verified while Postgres is unreachable.
#[derive(Clone, Default)]
pub struct TokenCache(std::sync::Arc<std::sync::Mutex<Verified>>);

/// Principals by token hash, with when each was verified.
type Verified = std::collections::HashMap<Vec<u8>, (Principal, std::time::Instant)>;

impl TokenCache {
    /// Forgets one token (after its revocation), by its SHA-256.
    pub fn remove(&self, hash: &[u8]) {
        self.0.lock().expect("token cache").remove(hash);
    }

    /// Whether a verification of `hash` is fresh here (no database query would be made).
    pub fn is_fresh(&self, hash: &[u8]) -> bool {
        self.get(hash).is_some_and(|(_, fresh)| fresh)
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
pub(crate) async fn verify_token(
    state: &AppState,
    tokens: &TokenCache,
    raw: &str,
) -> Result<Option<Principal>, sqlx::Error> {
    let hash = sha256(raw);
    let cached = tokens.get(&hash);
    if let Some((p, true)) = &cached {
        return Ok(Some(p.clone()));
    }
    match token(&state.auth_db, raw).await {
        Ok(Some(p)) => {
            tokens.put(hash, p.clone());
            Ok(Some(p))
        }
        Ok(None) => {
            // Revoked (or never known): never served from the cache again.
            tokens.remove(&hash);
            Ok(None)
        }
        // Only when Postgres cannot be reached; any other error is an error.
        Err(e) if !crate::error::is_unavailable(&e) => Err(e),
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
    let row = store::use_token(db, &sha256(raw)).await?;
    let Some(t) = row else { return Ok(None) };
    // A scope no version wrote serves nothing rather than anything.
    let Some(scope) = Scope::parse(&t.scope) else { return Ok(None) };
    let bindings = std::sync::Arc::new(Bindings::stored(&t.tenants, &t.pools, &t.routes, &t.channels));
    Ok(Some(Principal { name: format!("token:{}:{}", t.id, t.name), via: Via::Token { scope, bindings } }))
}
