//! Change requests and approval policies (four-eyes). Where a policy applies to a pool
//! (`pool:<name>`, else `pools`), its weights change only through a change request: one
//! operation with the body of the direct write, bound by a content hash to what it changes
//! and to the configuration version it was made against; approved by enough people in the
//! policy's roles, never by its author (admins included); applied only while that version
//! is current (otherwise suspended, saying what moved). Each state change is a row in the
//! audit chain (entity `change:<id>`). Direct weight writes to such a pool are refused
//! (409 naming the policy); operations that only reduce risk (eject, disable, rebuild) stay
//! immediate.

pub mod diff;
pub mod entities;
pub mod list;
pub mod operation;
pub mod propose;
pub mod routes;
pub mod schedule;
pub mod store;

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

/// Without a policy a request still needs one approval by a pm or an admin, and lives
/// three days.
const DEFAULT_ROLES: [&str; 2] = ["pm", "admin"];
const DEFAULT_HOURS: i32 = 72;

/// A request's terms under `policy` (none: one approval by a pm or an admin, three days):
/// the policy's scope, the approvals it needs (one more when the diff met a risk rule; at
/// most 10), who reviews, and how many hours it lives.
pub(crate) fn terms(
    policy: Option<&api::changes::Policy>,
    diff: &serde_json::Value,
) -> (Option<String>, i16, Vec<String>, i32) {
    let risky = diff["risk"].as_array().is_some_and(|r| !r.is_empty());
    match policy {
        Some(p) => (
            Some(p.scope.clone()),
            (p.required_approvals + i16::from(risky)).min(10),
            p.approver_roles.clone(),
            p.expires_after_hours,
        ),
        None => (None, 1, DEFAULT_ROLES.map(str::to_owned).to_vec(), DEFAULT_HOURS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_traffic_is_half_the_sum_of_the_share_changes() {
        let w = |spec: &str| engine::Weights::parse_spec(spec).unwrap();
        assert_eq!(moved_percent(&w("A=1,B=1"), &w("A=1,B=1")), 0.0);
        assert_eq!(moved_percent(&w("A=1,B=1"), &w("A=3,B=1")), 25.0);
        assert_eq!(moved_percent(&w("A=1"), &w("B=1")), 100.0);
        assert_eq!(moved_percent(&w("A=45,B=30,C=25"), &w("A=45,B=30,D=25")), 25.0);
    }
}
