//! The audit part of the configuration: the key the chain is signed with (kept outside the
//! database) and the role that migrates (apart from the role the server runs as).

use secrecy::{ExposeSecret, SecretString};

/// The secret the audit chain is keyed with (`TESSERA_AUDIT_KEY`, at least 32 bytes; from
/// the environment only, so it never sits in a file beside the database's address).
#[derive(Clone)]
pub struct AuditKey(SecretString);

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditKey(<redacted>)")
    }
}

impl AuditKey {
    /// The smallest key accepted, in bytes (a 256-bit secret).
    pub const MIN_BYTES: usize = 32;

    /// Parses a key, naming the variable and the rule when it is too short.
    pub fn parse(raw: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            raw.len() >= Self::MIN_BYTES,
            "TESSERA_AUDIT_KEY: must be at least {} bytes (for example `openssl rand -hex 32`), got {}",
            Self::MIN_BYTES,
            raw.len()
        );
        anyhow::ensure!(
            !raw.chars().any(char::is_whitespace),
            "TESSERA_AUDIT_KEY: must not contain whitespace (a line break copied with it, perhaps)"
        );
        Ok(Self(SecretString::from(raw.to_owned())))
    }

    /// The key's bytes, for the HMAC.
    pub fn bytes(&self) -> &[u8] {
        self.0.expose_secret().as_bytes()
    }
}

/// The key, from the environment only (a file has no place for it).
pub(super) fn key(env: &impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<AuditKey>> {
    env("TESSERA_AUDIT_KEY").filter(|v| !v.is_empty()).map(|raw| AuditKey::parse(&raw)).transpose()
}

/// The URL of the role that owns the schema and applies migrations
/// (`database.migrate_url`, `TESSERA_MIGRATE_DATABASE_URL`): when set, the server
/// migrates through it and serves as `DATABASE_URL`'s role, which may append to the audit
/// trail but not rewrite it.
pub(super) fn migrate_url(
    env: &impl Fn(&str) -> Option<String>,
    from_file: Option<String>,
) -> anyhow::Result<Option<SecretString>> {
    match env("TESSERA_MIGRATE_DATABASE_URL").filter(|v| !v.is_empty()).or(from_file) {
        None => Ok(None),
        Some(url) => {
            super::check_url("database.migrate_url (TESSERA_MIGRATE_DATABASE_URL)", &url, &["postgres", "postgresql"])?;
            Ok(Some(SecretString::from(url)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_spaced_key_is_refused_by_name() {
        let short = AuditKey::parse("too short").unwrap_err().to_string();
        assert!(short.contains("TESSERA_AUDIT_KEY") && short.contains("at least 32 bytes"), "{short}");
        let spaced = AuditKey::parse(&format!("{}\n", "k".repeat(40))).unwrap_err().to_string();
        assert!(spaced.contains("whitespace"), "{spaced}");
        let key = AuditKey::parse(&"k".repeat(32)).unwrap();
        assert_eq!(key.bytes().len(), 32);
        assert_eq!(format!("{key:?}"), "AuditKey(<redacted>)");
    }

    #[test]
    fn the_migrating_role_is_a_postgres_url() {
        let env = |name: &str| (name == "TESSERA_MIGRATE_DATABASE_URL").then(|| "redis://x".to_owned());
        let err = migrate_url(&env, None).unwrap_err().to_string();
        assert!(err.contains("TESSERA_MIGRATE_DATABASE_URL"), "{err}");
        let none = |_: &str| None;
        assert!(migrate_url(&none, None).unwrap().is_none());
        assert!(migrate_url(&none, Some("postgres://owner@db/tessera".into())).unwrap().is_some());
    }
}
