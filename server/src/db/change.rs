//! One transaction per change (DESIGN §5): the new snapshot version, its audit row and its
//! outbox row are written together, or nothing is.

use serde::Serialize;
use sqlx::PgPool;

use super::audit::{insert_audit, AuditRow, NewAudit, Source};

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

/// Writes the change: the next snapshot version of the entity, an audit row with the
/// previous body as `before`, and an outbox row for the publisher; all or nothing.
#[tracing::instrument(skip_all, fields(entity = change.entity, action = change.action), err)]
pub async fn apply_change(db: &PgPool, change: &Change<'_>) -> Result<Applied, ChangeError> {
    validate_body(change.entity, change.body)?;
    let mut tx = db.begin().await?;
    // Versions of one entity are written one at a time.
    sqlx::query("select pg_advisory_xact_lock(hashtext($1))").bind(change.entity).execute(&mut *tx).await?;
    let current: Option<(i64, serde_json::Value)> =
        sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
            .bind(change.entity)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(expected) = change.expected_version {
        let at = current.as_ref().map_or(0, |(v, _)| *v);
        if at != expected {
            return Err(ChangeError::Conflict { entity: change.entity.to_owned(), expected, current: at });
        }
    }
    let before = current.map(|(_, body)| body);
    let version = super::snapshot::insert_next(&mut tx, change.entity, change.body).await?;
    let audit = insert_audit(
        &mut tx,
        &NewAudit {
            actor: change.actor,
            source: change.source,
            action: change.action,
            entity: change.entity,
            before: before.as_ref(),
            after: Some(change.body),
            reason: change.reason,
            request_id: change.request_id,
        },
    )
    .await?;
    let outbox_id: i64 = sqlx::query_scalar("insert into outbox (entity, version) values ($1, $2) returning id")
        .bind(change.entity)
        .bind(version)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Applied { version, audit, outbox_id })
}
