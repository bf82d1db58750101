//! The reply to an audited write: what it wrote, and whether Redis has it already.

use serde::{Deserialize, Serialize};

/// One entity a change wrote: its new version, its audit row and, when it is published,
/// its outbox row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Written {
    /// The entity's key: `pool:<name>`, `tenant:<name>`, `channel:<code>`, `plan:<name>`.
    pub entity: String,
    /// What was done, e.g. `pool.weights`, `channel.disable`.
    pub action: String,
    /// The entity's version after the change.
    pub version: i64,
    /// The audit row recording the change.
    pub audit_id: i64,
    /// The outbox row of a published entity (pools, tenants); null for the others.
    pub outbox_id: Option<i64>,
}

/// The reply to a write (tenants, grants, plans, channels, pins): the first entity
/// written, whether it is published, and every entity the change wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WriteReply {
    /// The entity the request changed (the first of `changes`).
    pub entity: String,
    /// Its version after the change.
    pub version: i64,
    /// Its audit row.
    pub audit_id: i64,
    /// Whether Redis has it already; the outbox delivers it otherwise.
    pub published: bool,
    /// Every entity written, the requested one first.
    pub changes: Vec<Written>,
}

impl WriteReply {
    /// The reply to a change that wrote `written` (at least one entity, the requested one
    /// first).
    ///
    /// # Panics
    /// When `written` is empty: every change writes its own entity.
    pub fn of(written: &[Written], published: bool) -> Self {
        let first = &written[0];
        Self {
            entity: first.entity.clone(),
            version: first.version,
            audit_id: first.audit_id,
            published,
            changes: written.to_vec(),
        }
    }
}
