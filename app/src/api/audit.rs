//! The audit trail as the audit page shows it: filtered pages of rows with their
//! before/after differences, and the hash chain's state.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// Rows per page on the audit page.
pub const AUDIT_PAGE_SIZE: i64 = 50;

/// The audit page's filters, as typed (times are checked by the server).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub entity: Option<String>,
    pub actor: Option<String>,
    pub action: Option<String>,
    /// RFC 3339, or `YYYY-MM-DDTHH:MM` / `YYYY-MM-DD` read as UTC.
    pub from: Option<String>,
    pub to: Option<String>,
    /// Cursor: rows older than this id.
    pub before_id: Option<i64>,
}

/// One row as the [`super::Backend`] returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: i64,
    /// When, in UTC, for display.
    pub at: String,
    pub actor: String,
    pub source: String,
    pub action: String,
    pub entity: String,
    pub reason: Option<String>,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

/// A page of rows as the [`super::Backend`] returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecords {
    pub rows: Vec<AuditRecord>,
    /// The cursor of the next (older) page, if any.
    pub next: Option<i64>,
    /// The filters, checked and URL-encoded, without the cursor: for the CSV export link
    /// and the paging links.
    pub filter_query: String,
}

/// How one key differs between before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

impl ChangeKind {
    /// The word the page shows (the difference is said in text, not colour alone).
    pub fn label(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Changed => "changed",
        }
    }
}

/// One key that differs; nested keys are joined with dots (`weights.a`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    pub key: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// One row as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub source: String,
    pub action: String,
    pub entity: String,
    pub reason: Option<String>,
    pub changes: Vec<Change>,
}

/// A page of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditView {
    pub entries: Vec<AuditEntry>,
    pub next: Option<i64>,
    pub filter_query: String,
}

/// The hash chain's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainStatus {
    pub intact: bool,
    pub rows: i64,
    pub first_broken: Option<i64>,
    /// `content`, `link`, `gap`, `signature`, `unsigned` or `checkpoint`.
    pub problem: Option<String>,
    /// Signatures under the audit key were checked too.
    pub keyed: bool,
    /// The first row checked: rows before it were found intact by an earlier check (a
    /// signed checkpoint) and are checked again only by a full check.
    pub checked_from: i64,
}

/// The fields that name an element of a list of objects (a pool's weights by member, grants
/// by id), tried in this order.
const ELEMENT_KEYS: [&str; 6] = ["member", "id", "code", "channel", "name", "tier"];

/// The keys that differ between `before` and `after`, sorted by key. Objects are compared
/// key by key (nested ones by dotted path); a list element by its name when every element
/// has a distinct plain one (`weights[ALIPAY_A].weight`), else by its position
/// (`windows[0].start`); anything else is one value under `value`.
pub fn diff(before: Option<&serde_json::Value>, after: Option<&serde_json::Value>) -> Vec<Change> {
    use std::collections::BTreeMap;
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    flatten(&key, v, out);
                }
            }
            serde_json::Value::Array(items) if !items.is_empty() => {
                // Elements by name only when every element has one, under the same field,
                // each different and plain (no `.`, `[` or `]`): else by position.
                let names: Vec<Option<(&str, &str)>> = items
                    .iter()
                    .map(|item| {
                        item.as_object().and_then(|o| {
                            ELEMENT_KEYS.iter().find_map(|k| o.get(*k).and_then(|v| v.as_str()).map(|v| (*k, v)))
                        })
                    })
                    .collect();
                let by_name = names.iter().all(|n| {
                    n.is_some_and(|(field, name)| {
                        Some(field) == names[0].map(|(f, _)| f) && !name.is_empty() && !name.contains(['.', '[', ']'])
                    })
                }) && {
                    let distinct: std::collections::BTreeSet<&str> = names.iter().flatten().map(|(_, n)| *n).collect();
                    distinct.len() == items.len()
                };
                for (i, item) in items.iter().enumerate() {
                    let name = if by_name { names[i] } else { None };
                    match (name, item) {
                        (Some((field, name)), serde_json::Value::Object(o)) => {
                            let element = format!("{prefix}[{name}]");
                            let rest: serde_json::Map<String, serde_json::Value> = o
                                .iter()
                                .filter(|(k, _)| k.as_str() != field)
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect();
                            if rest.is_empty() {
                                out.insert(element, name.to_owned());
                            } else {
                                flatten(&element, &serde_json::Value::Object(rest), out);
                            }
                        }
                        _ => flatten(&format!("{prefix}[{i}]"), item, out),
                    }
                }
            }
            serde_json::Value::Null if prefix.is_empty() => {}
            other => {
                let key = if prefix.is_empty() { "value".to_owned() } else { prefix.to_owned() };
                let text = match other {
                    serde_json::Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                out.insert(key, text);
            }
        }
    }
    let (mut b, mut a) = (BTreeMap::new(), BTreeMap::new());
    if let Some(v) = before {
        flatten("", v, &mut b);
    }
    if let Some(v) = after {
        flatten("", v, &mut a);
    }
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (old, new) = (b.get(k), a.get(k));
            let kind = match (old, new) {
                (None, Some(_)) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Removed,
                (Some(o), Some(n)) if o != n => ChangeKind::Changed,
                _ => return None,
            };
            Some(Change { kind, key: k.clone(), before: old.cloned(), after: new.cloned() })
        })
        .collect()
}

/// A page of audit rows, newest first, for any signed-in user. The filters are separate
/// optional arguments, so that a query string without them reads as "no filter".
#[server(prefix = "/sfn", endpoint = "audit", input = GetUrl)]
pub async fn list_audit(
    entity: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    from: Option<String>,
    to: Option<String>,
    before_id: Option<i64>,
) -> Result<AuditView, ServerFnError> {
    super::session::ssr::require_session().await?;
    let query = AuditQuery { entity, actor, action, from, to, before_id };
    let records = super::backend()?.audit(query).await.map_err(ServerFnError::new)?;
    Ok(AuditView {
        entries: records
            .rows
            .into_iter()
            .map(|r| AuditEntry {
                changes: diff(r.before.as_ref(), r.after.as_ref()),
                id: r.id,
                at: r.at,
                actor: r.actor,
                source: r.source,
                action: r.action,
                entity: r.entity,
                reason: r.reason,
            })
            .collect(),
        next: records.next,
        filter_query: records.filter_query,
    })
}

/// The chain's state, for auditors and admins.
#[server(prefix = "/sfn", endpoint = "audit_verify", input = GetUrl)]
pub async fn verify_audit_chain() -> Result<ChainStatus, ServerFnError> {
    let session = super::session::ssr::require_session().await?;
    // Over HTTP the guard has answered 403 already; this covers calls during SSR.
    if !session.may_export_audit {
        return Err(ServerFnError::new(format!("role {} may not verify the audit chain", session.role)));
    }
    super::backend()?.verify_audit().await.map_err(ServerFnError::new)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{diff, ChangeKind};

    #[test]
    fn a_diff_names_keys_added_removed_and_changed_and_skips_equal_ones() {
        let before = json!({"weights": {"a": 70, "b": 30}, "mode": "drain", "same": 1});
        let after = json!({"weights": {"a": 60, "c": 40}, "same": 1, "reason": "ramp"});
        let changes = diff(Some(&before), Some(&after));
        let got: Vec<(ChangeKind, &str)> = changes.iter().map(|c| (c.kind, c.key.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (ChangeKind::Removed, "mode"),
                (ChangeKind::Added, "reason"),
                (ChangeKind::Changed, "weights.a"),
                (ChangeKind::Removed, "weights.b"),
                (ChangeKind::Added, "weights.c"),
            ]
        );
        assert_eq!(changes[2].before.as_deref(), Some("70"));
        assert_eq!(changes[2].after.as_deref(), Some("60"));
    }

    #[test]
    fn list_elements_are_compared_by_their_name_or_their_position() {
        let before = json!({"weights": [{"member": "A", "weight": 45}, {"member": "B", "weight": 55}], "tags": ["x"]});
        let after =
            json!({"weights": [{"member": "A", "weight": 50}, {"member": "C", "weight": 50}], "tags": ["x", "y"]});
        let changes = diff(Some(&before), Some(&after));
        let got: Vec<(ChangeKind, &str)> = changes.iter().map(|c| (c.kind, c.key.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (ChangeKind::Added, "tags[1]"),
                (ChangeKind::Changed, "weights[A].weight"),
                (ChangeKind::Removed, "weights[B].weight"),
                (ChangeKind::Added, "weights[C].weight"),
            ]
        );
        assert_eq!((changes[1].before.as_deref(), changes[1].after.as_deref()), (Some("45"), Some("50")));
    }

    #[test]
    fn elements_sharing_a_name_are_compared_by_position() {
        let before = json!({"w": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]});
        let after = json!({"w": [{"name": "x", "v": 1}, {"name": "x", "v": 3}]});
        let changes = diff(Some(&before), Some(&after));
        let got: Vec<(ChangeKind, &str)> = changes.iter().map(|c| (c.kind, c.key.as_str())).collect();
        assert_eq!(got, vec![(ChangeKind::Changed, "w[1].v")]);
    }

    #[test]
    fn a_created_entity_is_all_additions_and_a_scalar_is_one_value() {
        let changes = diff(None, Some(&json!({"kind": "channels"})));
        assert_eq!(changes.len(), 1);
        assert_eq!((changes[0].kind, changes[0].after.as_deref()), (ChangeKind::Added, Some("channels")));
        let changes = diff(Some(&json!(true)), Some(&json!(false)));
        assert_eq!((changes[0].kind, changes[0].key.as_str()), (ChangeKind::Changed, "value"));
        assert!(diff(Some(&json!(null)), None).is_empty());
    }
}
