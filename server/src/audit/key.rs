//! The key the audit chain is signed with: HMAC-SHA-256 under `TESSERA_AUDIT_KEY`, a secret
//! kept outside the database. One key per process, installed at start; every audit row
//! written afterwards is signed in its own transaction, wherever it is written from.

use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::configuration::AuditKey;

type HmacSha256 = Hmac<Sha256>;

static KEY: OnceLock<AuditKey> = OnceLock::new();

/// Installs the process's key. A second, different key is refused: rows signed with two
/// keys in one process would be a chain no one can verify.
pub fn install(key: &AuditKey) -> anyhow::Result<()> {
    let installed = KEY.get_or_init(|| key.clone());
    anyhow::ensure!(installed.bytes() == key.bytes(), "TESSERA_AUDIT_KEY: this process already signs with another key");
    Ok(())
}

/// Whether rows are signed (a key is installed).
pub fn keyed() -> bool {
    KEY.get().is_some()
}

fn mac(parts: &[&[u8]]) -> Option<HmacSha256> {
    let key = KEY.get()?;
    let mut mac = HmacSha256::new_from_slice(key.bytes()).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    Some(mac)
}

/// The signature of one audit row: over [`super::store`]'s encoding of every stored column
/// (its content, its id and time, its `prev_hash` and its hash), so it vouches for the
/// content itself, not only for a hash the database computed. `None` without a key.
pub fn sign_row(content: &[u8]) -> Option<Vec<u8>> {
    mac(&[b"row", content]).map(|m| m.finalize().into_bytes().to_vec())
}

/// Whether `signature` is the row signature of `content` (compared in constant time);
/// false without a key.
pub fn row_signed(content: &[u8], signature: &[u8]) -> bool {
    mac(&[b"row", content]).is_some_and(|m| m.verify_slice(signature).is_ok())
}

/// The signature of a checkpoint: rows up to `id` verified, `id`'s hash being `hash`.
pub fn sign_checkpoint(id: i64, hash: &[u8]) -> Option<Vec<u8>> {
    mac(&[b"checkpoint", &id.to_be_bytes(), hash]).map(|m| m.finalize().into_bytes().to_vec())
}

/// Whether `signature` is the checkpoint signature of `id` and `hash`.
pub fn checkpoint_signed(id: i64, hash: &[u8], signature: &[u8]) -> bool {
    mac(&[b"checkpoint", &id.to_be_bytes(), hash]).is_some_and(|m| m.verify_slice(signature).is_ok())
}
