//! A proposal checked as its direct write would check it, against the entity's current
//! version: the operation as stored, that version, the content hash approvals name, the
//! diff reviewers see, and the policy that applies.

use api::changes::Policy;
use client::pool::PoolName;
use serde_json::{json, Value};
use sqlx::PgConnection;

use super::entities::Target;
use super::operation::resolve;
use super::operation::Operation;
use crate::change::{Ctx, Entity};
use crate::error::ApiError;
use crate::pools::unknown_pool;

/// A proposed operation on a pool, made against its configuration version
/// `expected_version`.
pub struct Proposal {
    pub operation: Operation,
    pub expected_version: i64,
}

/// A proposal checked as the direct write would check it (so an approved request applies),
/// against the pool's current configuration version (404 unknown pool, 409 another
/// version): the operation, that version, the content hash and the diff.
pub(super) async fn proposed(
    tx: &mut PgConnection,
    pool: &PoolName,
    proposal: &Proposal,
    reason: &str,
    policy: Option<&Policy>,
    revision: i32,
) -> Result<(Value, i64, String, Value), ApiError> {
    let entity = Entity::pool_key(pool);
    let (current, body) =
        crate::pools::store::compile_pool(&mut *tx, pool.as_str()).await?.ok_or_else(|| unknown_pool(pool))?;
    if current != proposal.expected_version {
        return Err(ApiError::Conflict { entity, expected: proposal.expected_version, current });
    }
    let before = crate::pools::parse_pool_body(&body)?;
    let (edit, undoes) = resolve(&mut *tx, pool, &proposal.operation, current, &body).await?;
    let mut after = before.clone();
    edit.clone().apply(&mut after)?;
    after.version = before.version;
    after.validate().map_err(|e| ApiError::from(crate::inputs::from_input(e)))?;
    after.check_peak_batches().map_err(|e| ApiError::from(crate::inputs::from_input(e)))?;
    // What reviewers approve is what applies: defaults looked up now are written out.
    let operation = serde_json::to_value(proposal.operation.pinned(&edit, &before))
        .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("operation: {e}")))?;
    let content_hash = content_hash(&entity, current, &operation, reason, revision);
    let diff = super::diff::diff(&before, &after, policy, undoes.as_deref());
    Ok((operation, current, content_hash, diff))
}

/// [`proposed`] for any target: a pool's under its own policy (or `pools`'), a channel's,
/// plan's or tenant's under its scope's (checked by running it in a rolled-back
/// savepoint). Answers the operation as stored, the base version, the content hash, the
/// diff and the policy.
pub(super) async fn proposed_for(
    tx: &mut PgConnection,
    ctx: &Ctx<'_>,
    target: &Target,
    proposal: &Proposal,
    reason: &str,
    revision: i32,
) -> Result<(Value, i64, String, Value, Option<Policy>), ApiError> {
    if proposal.operation.entity_kind() != target.kind() {
        return Err(ApiError::Unprocessable {
            field: "operation".into(),
            rule: format!(
                "{} changes a {}, not a {}",
                proposal.operation.action(),
                proposal.operation.entity_kind(),
                target.kind()
            ),
        });
    }
    if let Target::Pool(pool) = target {
        let policy = crate::gate::policy::store::policy_for(&mut *tx, pool).await?;
        let (operation, current, hash, diff) = proposed(tx, pool, proposal, reason, policy.as_ref(), revision).await?;
        return Ok((operation, current, hash, diff, policy));
    }
    let policy = crate::gate::policy::store::policy_of(&mut *tx, target.scope()).await?;
    let (current, diff) =
        super::entities::proposed(tx, ctx, target, &proposal.operation, proposal.expected_version).await?;
    let operation = serde_json::to_value(&proposal.operation)
        .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("operation: {e}")))?;
    let hash = content_hash(&target.key(), current, &operation, reason, revision);
    Ok((operation, current, hash, diff, policy))
}

/// SHA-256 (hex) of what approvals name.
fn content_hash(entity: &str, base_version: i64, operation: &Value, reason: &str, revision: i32) -> String {
    crate::inputs::hex(&crate::access::sha256(
        &json!({"entity": entity, "base_version": base_version, "operation": operation, "reason": reason,
            "revision": revision})
        .to_string(),
    ))
}
