//! The approval gate every write passes, below the resources that call it: the approval
//! policies ([`policy`]: which pools and scopes change only through a change request) and
//! the break-glass flags ([`break_glass`]: an emergency write made past a policy, for
//! someone to acknowledge). `approvals` (the change requests) sits above the resources and
//! applies its operations through them.

pub mod break_glass;
pub mod policy;

use client::pool::PoolName;

use crate::error::ChangeError;

/// 409 naming the policy when one applies to `pool`: its configuration changes through a
/// change request (`POST /api/v1/changes`). The pool writes call it in their transaction,
/// after the configuration lock, so a policy made meanwhile is never missed.
pub async fn refuse_direct_write<'e>(db: impl sqlx::PgExecutor<'e>, pool: &PoolName) -> Result<(), ChangeError> {
    if let Some(policy) = policy::store::policy_for(db, pool).await? {
        return Err(ChangeError::Blocked {
            field: "policy".into(),
            rule: format!(
                "approval policy {:?} applies to pool {:?}: propose the change with POST /api/v1/changes \
                 ({} approval(s) by {})",
                policy.scope,
                pool.as_str(),
                policy.required_approvals,
                policy.approver_roles.join(" or ")
            ),
        });
    }
    Ok(())
}
