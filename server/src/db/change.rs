//! One transaction per change (DESIGN §5): the new snapshot version, its audit row and its
//! outbox row are written together, or nothing is.

use serde::Serialize;
use sqlx::PgPool;

use super::audit::{AuditRow, Source};

/// A change to a published entity: its whole new body, who made it, from where, and why.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// `pool:<name>`, `tenant:<name>`, …
    pub entity: &'a str,
    /// What was done, e.g. `pool.weights`, `seed`.
    pub action: &'a str,
    pub actor: &'a str,
    pub source: Source,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
    /// The entity's new body (stored as its next snapshot version).
    pub body: &'a serde_json::Value,
    /// Optimistic concurrency: the version the change was made against (0: the entity must
    /// not exist yet). A different current version refuses the change.
    pub expected_version: Option<i64>,
}

/// Why a change was not written.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The entity is at another version than the change expected (someone else changed it).
    #[error("{entity} is at version {current}, not {expected}")]
    Conflict { entity: String, expected: i64, current: i64 },
    /// The body is not a valid snapshot of the entity's kind (or the kind is unknown).
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    /// The input does not parse (400), naming the field.
    #[error("{field}: {rule}")]
    Malformed { field: String, rule: String },
    /// Something with that identity exists already (and identities are never reused).
    #[error("{field}: {rule}")]
    Duplicate { field: String, rule: String },
    /// The entity the change is about does not exist.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Checks that `body` is a publishable snapshot of the entity's kind, so that nothing the
/// publisher cannot deliver ever reaches the outbox.
pub fn validate_body(entity: &str, body: &serde_json::Value) -> Result<(), ChangeError> {
    let invalid = |field: &str, rule: String| ChangeError::Invalid { field: field.to_owned(), rule };
    let mut versioned = body.clone();
    versioned
        .as_object_mut()
        .ok_or_else(|| invalid("body", "must be a JSON object".to_owned()))?
        .insert("version".to_owned(), serde_json::json!(1));
    if let Some(name) = entity.strip_prefix("pool:") {
        client::pool::PoolName::parse(name).map_err(|e| invalid("pool", e.rule))?;
        let snapshot: client::pool::PoolSnapshot =
            serde_json::from_value(versioned).map_err(|e| invalid("body", e.to_string()))?;
        snapshot.validate().map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
    } else if let Some(name) = entity.strip_prefix("tenant:") {
        client::quota::TenantId::parse(name).map_err(|e| invalid("tenant", e.rule))?;
        let quota: client::quota::TenantQuota =
            serde_json::from_value(versioned).map_err(|e| invalid("body", e.to_string()))?;
        quota.validate().map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
    } else {
        Err(invalid("entity", format!("{entity:?} is not a pool:<name> or tenant:<name>")))
    }
}

/// What a change wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub version: i64,
    pub audit: AuditRow,
    pub outbox_id: i64,
}

/// Writes the change to a pool: its rows, the next snapshot version, an audit row with
/// the previous body as `before`, and an outbox row for the publisher; all or nothing.
/// Tenants, plans and channels change through [`super::config`].
#[tracing::instrument(skip_all, fields(entity = change.entity, action = change.action), err)]
pub async fn apply_change(db: &PgPool, change: &Change<'_>) -> Result<Applied, ChangeError> {
    let Some(pool) = change.entity.strip_prefix("pool:") else {
        return Err(ChangeError::Invalid {
            field: "entity".into(),
            rule: format!(
                "{:?}: only pools are changed by body; tenants change through their plan, settings and grants",
                change.entity
            ),
        });
    };
    validate_body(change.entity, change.body)?;
    let ctx = super::config::Ctx {
        actor: change.actor,
        source: change.source,
        reason: change.reason,
        request_id: change.request_id,
    };
    let mut tx = db.begin().await?;
    let written = super::config::put_pool_tx(&mut tx, &ctx, pool, change.action, change.body, change.expected_version)
        .await?
        .written;
    let audit = super::audit::get_audit(&mut tx, written.audit_id).await?;
    tx.commit().await?;
    Ok(Applied { version: written.version, audit, outbox_id: written.outbox_id.unwrap_or_default() })
}
