//! The audit chain as the server computes it, never as the database says it is: a row's
//! hash is recomputed here from its stored content (the same definition as the
//! migration's `audit_row_hash`, whose function the schema's owner could replace), each
//! row's link, gap and signature are checked here, row by row, in id order ([`Walk`]).
//! The SQL that reads and writes the chain is in [`store`].

pub mod store;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::inputs::hex;

/// One audit row exactly as stored: its JSON as Postgres prints it (`jsonb::text`, the form
/// the hash and the signature cover), its hashes as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    pub id: i64,
    /// `None` when chrono cannot hold it (`infinity`, a year past 9999): never written by
    /// the server, so such a row is reported as changed.
    pub at: Option<DateTime<Utc>>,
    pub actor: String,
    pub source: String,
    pub action: String,
    pub entity: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub reason: Option<String>,
    pub request_id: Option<String>,
    pub prev_hash: Option<Vec<u8>>,
    pub hash: Vec<u8>,
}

impl StoredRow {
    /// SHA-256 of the row's content and `prev_hash`, as `audit_row_hash` defines it: the
    /// text of `jsonb_build_array(id, at, actor, source, action, entity, before, after,
    /// reason, request_id, hex(prev_hash))`.
    pub fn computed_hash(&self) -> Vec<u8> {
        let mut text = String::with_capacity(256);
        text.push('[');
        text.push_str(&self.id.to_string());
        let at = self.at.map_or_else(String::new, |at| at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string());
        for field in [&at, &self.actor, &self.source, &self.action, &self.entity] {
            text.push_str(", ");
            json_string(&mut text, field);
        }
        for json in [&self.before, &self.after] {
            text.push_str(", ");
            text.push_str(json.as_deref().unwrap_or("null"));
        }
        let prev = self.prev_hash.as_deref().map(hex);
        for field in [&self.reason, &self.request_id, &prev] {
            text.push_str(", ");
            match field {
                Some(value) => json_string(&mut text, value),
                None => text.push_str("null"),
            }
        }
        text.push(']');
        Sha256::digest(text.as_bytes()).to_vec()
    }

    /// The bytes a row's signature covers: every stored column in order, each as a
    /// presence byte, a length and its bytes, so that no two rows encode alike.
    pub fn signed_content(&self) -> Vec<u8> {
        fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
            match value {
                None => out.push(0),
                Some(bytes) => {
                    out.push(1);
                    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                    out.extend_from_slice(bytes);
                }
            }
        }
        let mut out = Vec::with_capacity(256);
        field(&mut out, Some(&self.id.to_be_bytes()));
        field(&mut out, self.at.map(|at| at.timestamp_micros().to_be_bytes()).as_ref().map(|b| &b[..]));
        for text in [&self.actor, &self.source, &self.action, &self.entity] {
            field(&mut out, Some(text.as_bytes()));
        }
        for text in [&self.before, &self.after, &self.reason, &self.request_id] {
            field(&mut out, text.as_deref().map(str::as_bytes));
        }
        field(&mut out, self.prev_hash.as_deref());
        field(&mut out, Some(&self.hash));
        out
    }
}

/// A string as Postgres's `jsonb` prints it: `"`, `\` and the control characters escaped
/// (the short forms where JSON has them, else `\u00xx`), everything else as it is.
fn json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What is wrong with a row, in the order it is looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// A row before it is missing (or its id is not the next one).
    Gap,
    /// Its stored hash is not the hash of its content.
    Content,
    /// Its `prev_hash` is not the previous row's hash.
    Link,
    /// Its signature is not the key's over its content.
    Signature,
    /// It has no signature.
    Unsigned,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gap => "gap",
            Self::Content => "content",
            Self::Link => "link",
            Self::Signature => "signature",
            Self::Unsigned => "unsigned",
        }
    }
}

/// A check of the chain, fed one row at a time in id order from a known start: row 1 (no
/// predecessor), or the row after a signed checkpoint (its hash the predecessor's).
#[derive(Debug, Clone)]
pub struct Walk {
    next_id: i64,
    prev_hash: Option<Vec<u8>>,
    signatures: bool,
}

impl Walk {
    /// From row 1. `signatures`: check each row's signature with the process's key.
    pub fn from_first(signatures: bool) -> Self {
        Self { next_id: 1, prev_hash: None, signatures }
    }

    /// From the row after `id`, whose hash was `hash`.
    pub fn after(id: i64, hash: Vec<u8>, signatures: bool) -> Self {
        Self { next_id: id.saturating_add(1), prev_hash: Some(hash), signatures }
    }

    /// Checks the next row (`mac`: its stored signature); on success it becomes the
    /// predecessor of the next.
    pub fn step(&mut self, row: &StoredRow, mac: Option<&[u8]>) -> Result<(), Problem> {
        if row.id != self.next_id {
            return Err(Problem::Gap);
        }
        if row.at.is_none() || row.computed_hash() != row.hash {
            return Err(Problem::Content);
        }
        if row.prev_hash != self.prev_hash {
            return Err(Problem::Link);
        }
        if self.signatures {
            match mac {
                None => return Err(Problem::Unsigned),
                Some(mac) if !super::key::row_signed(&row.signed_content(), mac) => return Err(Problem::Signature),
                Some(_) => {}
            }
        }
        self.next_id = row.id.saturating_add(1);
        self.prev_hash = Some(row.hash.clone());
        Ok(())
    }

    /// The last row checked: its id and hash (`None` before the first).
    pub fn last(&self) -> Option<(i64, &[u8])> {
        self.prev_hash.as_deref().map(|hash| (self.next_id - 1, hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> StoredRow {
        StoredRow {
            id: 1,
            at: Some("2026-01-02T03:04:05.000007Z".parse().unwrap()),
            actor: "a\"b\\c\u{1}\u{8}\t\n\u{c}\r\u{1f}é✓\u{2028}".into(),
            source: "api".into(),
            action: "pool.weights".into(),
            entity: "pool:cn-pay".into(),
            before: Some(r#"{"a": [1, 2.50, 100, {"x": null}], "bb": 1}"#.into()),
            after: None,
            reason: None,
            request_id: Some("r-1".into()),
            prev_hash: None,
            hash: vec![],
        }
    }

    #[test]
    fn strings_are_escaped_as_jsonb_prints_them() {
        let mut out = String::new();
        json_string(&mut out, &row().actor);
        // Printed by Postgres 15: select to_jsonb('a"b\c' || chr(1) || … )::text
        assert_eq!(out, "\"a\\\"b\\\\c\\u0001\\b\\t\\n\\f\\r\\u001fé✓\u{2028}\"");
    }

    #[test]
    fn a_walk_names_the_first_problem_of_each_kind() {
        let mut first = row();
        first.hash = first.computed_hash();
        let mut second = row();
        second.id = 2;
        second.prev_hash = Some(first.hash.clone());
        second.hash = second.computed_hash();

        let mut walk = Walk::from_first(false);
        assert_eq!(walk.step(&first, None), Ok(()));
        assert_eq!(walk.step(&second, None), Ok(()));
        assert_eq!(walk.last(), Some((2, &second.hash[..])));

        let mut edited = second.clone();
        edited.reason = Some("edited".into());
        assert_eq!(Walk::after(1, first.hash.clone(), false).step(&edited, None), Err(Problem::Content));
        assert_eq!(Walk::after(1, vec![0; 32], false).step(&second, None), Err(Problem::Link));
        assert_eq!(Walk::from_first(false).step(&second, None), Err(Problem::Gap));
    }
}
