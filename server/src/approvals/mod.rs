//! Change requests and approval policies (four-eyes). Where a policy applies to a pool
//! (`pool:<name>`, else `pools`), its weights change only through a change request: one
//! operation with the body of the direct write, bound by a content hash to what it changes
//! and to the configuration version it was made against; approved by enough people in the
//! policy's roles, never by its author (admins included); applied only while that version
//! is current (otherwise suspended, saying what moved). Each state change is a row in the
//! audit chain (entity `change:<id>`). Direct weight writes to such a pool are refused
//! (409 naming the policy); operations that only reduce risk (eject, disable, rebuild) stay
//! immediate.

pub mod break_glass;
pub mod policy;
pub mod routes;
pub mod schedule;
pub mod store;

use client::pool::PoolName;
use sqlx::PgPool;

use crate::access::{Principal, Via};
use crate::error::ApiError;

/// The role of the person proposing, reviewing or cancelling a request. Only a person
/// signed in (a session) does: an API token or the configured admin token stands for no
/// one person (an admin could approve their own request with a token they minted), so
/// "another person" could be the same one (403). The development mode counts as an admin.
pub fn person_role(principal: &Principal, what: &str) -> Result<String, ApiError> {
    match &principal.via {
        Via::Session { role, .. } => Ok(role.as_str().to_owned()),
        Via::Open => Ok("admin".to_owned()),
        Via::Token { .. } | Via::Configured => Err(ApiError::Forbidden(format!(
            "{what} is for a person signed in (a session): API tokens and the configured admin token stand for no \
             one person, so they neither propose nor review change requests"
        ))),
    }
}

/// 409 naming the policy when one applies to `pool`: its weights change through a change
/// request (`POST /api/v1/changes`).
pub async fn refuse_direct_write(db: &PgPool, pool: &PoolName) -> Result<(), ApiError> {
    if let Some(policy) = policy::store::policy_for(db, pool).await? {
        return Err(ApiError::Blocked {
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

/// The share of the traffic a change of weights moves: half the sum of the absolute
/// changes of each member's share, in percent (0 when nothing moves, 100 when every ticket
/// goes elsewhere).
pub fn moved_percent(before: &engine::Weights, after: &engine::Weights) -> f64 {
    let share = |w: &engine::Weights, m: &str| w.index_of(m).map_or(0.0, |i| w.weight(i) as f64 / w.total() as f64);
    let mut members: Vec<&str> = before.members().iter().map(String::as_str).collect();
    for m in after.members() {
        if !members.contains(&m.as_str()) {
            members.push(m);
        }
    }
    let sum: f64 = members.iter().map(|m| (share(after, m) - share(before, m)).abs()).sum();
    (sum / 2.0 * 100.0 * 100.0).round() / 100.0
}

/// The risk rules of `policy` a change of weights from `before` to `after` meets, in
/// words: more than `moved_percent_over` % of the traffic moved, or a member carrying more
/// than `member_share_over` % of it now changed. Each met rule is named; together they add
/// one approval.
pub fn risks(policy: &api::changes::Policy, before: &engine::Weights, after: &engine::Weights) -> Vec<String> {
    let mut met = Vec::new();
    let moved = moved_percent(before, after);
    if let Some(limit) = policy.moved_percent_over {
        if moved > limit {
            met.push(format!("moves {moved} % of the traffic, more than {limit} %"));
        }
    }
    if let Some(limit) = policy.member_share_over {
        let weight = |w: &engine::Weights, m: &str| w.index_of(m).map(|i| w.weight(i));
        for (i, member) in before.members().iter().enumerate() {
            let share = before.weight(i) as f64 * 100.0 / before.total() as f64;
            if share > limit && weight(after, member) != Some(before.weight(i)) {
                met.push(format!("changes {member}, which carries {:.2} % of the traffic, more than {limit} %", share));
            }
        }
    }
    met
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(moved: Option<f64>, member: Option<f64>) -> api::changes::Policy {
        api::changes::Policy {
            scope: "pools".into(),
            required_approvals: 1,
            approver_roles: vec!["pm".into()],
            expires_after_hours: 24,
            moved_percent_over: moved,
            member_share_over: member,
            version: 1,
            updated_at: String::new(),
        }
    }

    #[test]
    fn risk_rules_name_what_they_met() {
        let w = |spec: &str| engine::Weights::parse_spec(spec).unwrap();
        let (before, small, big) = (w("A=45,B=30,C=25"), w("A=45,B=31,C=25"), w("A=5,B=60,C=25"));
        assert!(risks(&policy(Some(10.0), None), &before, &small).is_empty());
        assert_eq!(risks(&policy(Some(10.0), None), &before, &big).len(), 1);
        let heavy = risks(&policy(None, Some(40.0)), &before, &big);
        assert_eq!(heavy.len(), 1, "{heavy:?}");
        assert!(heavy[0].contains('A'), "{heavy:?}");
        assert!(risks(&policy(None, Some(40.0)), &before, &small).is_empty(), "A did not change");
        assert!(risks(&policy(None, None), &before, &big).is_empty());
    }

    #[test]
    fn moved_traffic_is_half_the_sum_of_the_share_changes() {
        let w = |spec: &str| engine::Weights::parse_spec(spec).unwrap();
        assert_eq!(moved_percent(&w("A=1,B=1"), &w("A=1,B=1")), 0.0);
        assert_eq!(moved_percent(&w("A=1,B=1"), &w("A=3,B=1")), 25.0);
        assert_eq!(moved_percent(&w("A=1"), &w("B=1")), 100.0);
        assert_eq!(moved_percent(&w("A=45,B=30,C=25"), &w("A=45,B=30,D=25")), 25.0);
    }
}
