//! The access part of the configuration: sessions, the development mode (refused from a
//! file or the environment), the configured admin token.

use secrecy::SecretString;
use serde::Deserialize;

/// Logins and sessions.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Every `/api/v1` request is served as an admin without credentials: for development
    /// only, set by `tessera serve --open` alone (`auth.open` and `TESSERA_OPEN` are refused),
    /// on a loopback address, answering only requests sent to a loopback host.
    pub open: bool,
    /// How long a login session lasts (`auth.session_hours`, 1..=720, default 12).
    pub session_ttl: std::time::Duration,
    /// How long a session lasts unused (`auth.idle_minutes`, `TESSERA_SESSION_IDLE_MINUTES`,
    /// 5..=1440, default 120): a session left open on a shared screen ends by itself.
    pub idle_ttl: std::time::Duration,
    /// Mark the session cookie Secure on every response (`auth.cookie_secure`,
    /// `TESSERA_COOKIE_SECURE`), for a TLS proxy that does not send X-Forwarded-Proto.
    /// Otherwise it is Secure when the request came over TLS.
    pub cookie_secure: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            open: false,
            session_ttl: std::time::Duration::from_secs(12 * 3600),
            idle_ttl: std::time::Duration::from_secs(2 * 3600),
            cookie_secure: false,
        }
    }
}

/// A configured bearer token with admin scope, for automation and bootstrapping
/// (`TESSERA_ADMIN_TOKEN`, at least 16 characters) and the actor audit rows name
/// (`TESSERA_ADMIN_ACTOR`, default `admin`). Users and API tokens are managed through the
/// API once one admin exists.
#[derive(Debug, Clone)]
pub struct AdminAccess {
    pub token: SecretString,
    pub actor: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAuth {
    open: Option<bool>,
    session_hours: Option<u32>,
    idle_minutes: Option<u32>,
    cookie_secure: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAdmin {
    token: Option<String>,
    actor: Option<String>,
}

/// A setting from the environment, else the file, else `default`.
fn pick(env: &impl Fn(&str) -> Option<String>, name: &str, from_file: Option<String>, default: &str) -> String {
    env(name).filter(|v| !v.is_empty()).or(from_file).unwrap_or_else(|| default.to_owned())
}

/// The configured admin token and its actor, if a token is set.
pub(super) fn admin(env: &impl Fn(&str) -> Option<String>, file: FileAdmin) -> anyhow::Result<Option<AdminAccess>> {
    Ok(match env("TESSERA_ADMIN_TOKEN").filter(|v| !v.is_empty()).or(file.token) {
        None => None,
        Some(token) => {
            anyhow::ensure!(
                token.chars().count() >= 16,
                "admin.token (TESSERA_ADMIN_TOKEN): must be at least 16 characters"
            );
            let actor = pick(env, "TESSERA_ADMIN_ACTOR", file.actor, "admin");
            // The actor is recorded as a user (table app_user), so it follows the user-name rule.
            anyhow::ensure!(
                (1..=64).contains(&actor.len()) && api::UserName::parse(&actor).is_ok(),
                "admin.actor (TESSERA_ADMIN_ACTOR): must be 1..=64 of ASCII letters, digits, '_', '.', '@', '-'"
            );
            Some(AdminAccess { token: SecretString::from(token), actor })
        }
    })
}

/// Sessions and the development mode.
pub(super) fn auth(env: &impl Fn(&str) -> Option<String>, file: FileAuth) -> anyhow::Result<AuthSettings> {
    let flag = |name: &str, field: &str, from_file: Option<bool>| -> anyhow::Result<bool> {
        match env(name).filter(|v| !v.is_empty()) {
            Some(raw) => match raw.as_str() {
                "1" | "true" => Ok(true),
                "0" | "false" => Ok(false),
                _ => anyhow::bail!("{field} ({name}): must be 1, true, 0 or false, got {raw:?}"),
            },
            None => Ok(from_file.unwrap_or(false)),
        }
    };
    // The development mode is a flag of one command line, never a setting that a file or an
    // environment left behind could switch on in production.
    anyhow::ensure!(
        env("TESSERA_OPEN").is_none() && file.open.is_none(),
        "auth.open (TESSERA_OPEN) is refused: open mode serves the API without credentials, so it is only \
         the flag of one command line (`tessera serve --open`, on a loopback address); remove the setting"
    );
    let open = false;
    let session_hours = file.session_hours.unwrap_or(12);
    anyhow::ensure!((1..=720).contains(&session_hours), "auth.session_hours: must be in 1..=720");
    let cookie_secure = flag("TESSERA_COOKIE_SECURE", "auth.cookie_secure", file.cookie_secure)?;
    let idle_minutes = match env("TESSERA_SESSION_IDLE_MINUTES").filter(|v| !v.is_empty()) {
        Some(raw) => raw.parse::<u32>().ok().filter(|m| (5..=1440).contains(m)).ok_or_else(|| {
            anyhow::anyhow!("auth.idle_minutes (TESSERA_SESSION_IDLE_MINUTES): must be in 5..=1440, got {raw:?}")
        })?,
        None => file.idle_minutes.unwrap_or(120),
    };
    anyhow::ensure!((5..=1440).contains(&idle_minutes), "auth.idle_minutes: must be in 5..=1440");
    let auth = AuthSettings {
        open,
        session_ttl: std::time::Duration::from_secs(u64::from(session_hours) * 3600),
        idle_ttl: std::time::Duration::from_secs(u64::from(idle_minutes) * 60),
        cookie_secure,
    };
    Ok(auth)
}
