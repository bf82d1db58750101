//! What needs attention now, for the top of the dashboard: members drawn off their share
//! (by the alert rules' own measures), decaying or ejected channels, paused or aborting
//! ramps, change requests waiting for the signed-in person's review, unacknowledged
//! break-glass flags and tenants over a budget threshold. Each item links to the page that
//! fixes it and says which alert fires if it lasts. Worked out from what the dashboard
//! reads anyway (and three small reads), by a pure function tested alone.

use serde::{Deserialize, Serialize};

use super::dashboard::PoolCard;
use super::dashboard::TenantQuota;
use api::changes::{BreakGlass, ChangeRequest, ChangeState};
use api::ramps::{RampState, RampSummary};

/// A tenant's use of its tokens this period, in percent, from which it is listed.
pub const BUDGET_THRESHOLD_PERCENT: f64 = 80.0;

/// The alert rules' measures of a member off its share (ops/prometheus/tessera-alerts.yml):
/// more than 10 points off in pools drawing over one ticket a second
/// (`TesseraPoolShareDeviation`), or more than 10 % of its expected share off in pools
/// drawing ten a second or more (`TesseraPoolShareOffRelative`). The rules wait 10 minutes
/// before firing; the strip shows the minute as it is. Like the rules, it leaves out a pool
/// whose newest sample is older than [`SAMPLE_FRESH_MS`].
const SHARE_POINTS: f64 = 0.10;
const SHARE_POINTS_RATE: f64 = 1.0;
const SHARE_RELATIVE: f64 = 0.10;
const SHARE_RELATIVE_RATE: f64 = 10.0;
const SAMPLE_FRESH_MS: i64 = 120_000;

/// How bad it is: `critical` (traffic or money is being lost now) or `warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Critical,
    Warning,
}

/// One thing to look at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Concern {
    pub severity: Severity,
    /// `share`, `health`, `ramp`, `review`, `break_glass` or `budget`.
    pub kind: String,
    /// What is wrong, in a sentence.
    pub text: String,
    /// The page that fixes it.
    pub href: String,
    /// The alert that fires when it lasts (its `for:`), if one watches it.
    pub alert: Option<String>,
}

/// Everything that needs attention at `now_ms`, the critical first, in a stable order.
/// `unread` names what could not be read (each becomes a warning of its own).
#[allow(clippy::too_many_arguments)]
pub fn concerns(
    now_ms: i64,
    pools: &[PoolCard],
    tenants: &[TenantQuota],
    ramps: &[RampSummary],
    changes: &[ChangeRequest],
    flags: &[BreakGlass],
    viewer: Option<(&str, &str)>,
    unread: &[String],
) -> Vec<Concern> {
    let mut out = Vec::new();
    for what in unread {
        out.push(Concern {
            severity: Severity::Warning,
            kind: "unread".into(),
            text: format!("Could not read {what}: this list may be missing some."),
            href: "/".into(),
            alert: None,
        });
    }
    for pool in pools {
        shares(now_ms, pool, &mut out);
        for m in &pool.members {
            let (severity, alert) = match m.state.as_str() {
                // Critical here though the rule pages as a warning: its draws are gone now.
                "ejected" => (Severity::Critical, Some("TesseraPoolMembersEjected (after 1 min)")),
                "decaying" => (Severity::Warning, None),
                _ => continue,
            };
            out.push(Concern {
                severity,
                kind: "health".into(),
                text: format!(
                    "Channel {} in pool {} is {}: effective weight {} of {}.",
                    m.channel, pool.name, m.state, m.effective_weight, m.base_weight
                ),
                href: format!("/channels/{}", m.channel),
                alert: alert.map(str::to_owned),
            });
        }
    }
    for r in ramps {
        let (severity, what) = match r.state {
            RampState::Paused => (Severity::Warning, "is paused"),
            RampState::Aborting => (Severity::Critical, "is aborting, back to its baseline"),
            _ => continue,
        };
        out.push(Concern {
            severity,
            kind: "ramp".into(),
            text: format!(
                "The ramp of pool {} {what} at step {} of {} (canary {} at {:.1} %).",
                r.pool,
                r.step,
                r.steps,
                r.canary.join(", "),
                r.canary_share
            ),
            href: format!("/pools/{}/ramp", r.pool),
            alert: None,
        });
    }
    if let Some((user, role)) = viewer {
        for c in changes.iter().filter(|c| c.state == ChangeState::InReview) {
            let reviewed = c.reviews.iter().any(|r| r.actor == user && r.content_hash == c.content_hash);
            if c.author == user || reviewed || !c.approver_roles.iter().any(|r| r == role) {
                continue;
            }
            out.push(Concern {
                severity: Severity::Warning,
                kind: "review".into(),
                text: format!(
                    "Change request #{} on {} by {} waits for your review ({} of {} approvals).",
                    c.id, c.entity, c.author, c.approvals, c.required_approvals
                ),
                href: "/changes?state=in_review".into(),
                alert: None,
            });
        }
    }
    let waiting = flags.iter().filter(|f| f.acknowledged_by.is_none()).count();
    if waiting > 0 {
        out.push(Concern {
            severity: Severity::Warning,
            kind: "break_glass".into(),
            text: format!(
                "{waiting} break-glass operation{} made under an approval policy wait{} for an auditor's acknowledgement.",
                if waiting == 1 { "" } else { "s" },
                if waiting == 1 { "s" } else { "" }
            ),
            href: "/changes#break-glass".into(),
            alert: None,
        });
    }
    for t in tenants {
        let Some(percent) = t.percent.filter(|p| *p >= BUDGET_THRESHOLD_PERCENT) else { continue };
        out.push(Concern {
            severity: if percent >= 100.0 { Severity::Critical } else { Severity::Warning },
            kind: "budget".into(),
            text: format!(
                "Tenant {} has used or reserved {percent:.1} % of its tokens this period{}.",
                t.name,
                t.period.as_ref().map(|p| format!(" ({p})")).unwrap_or_default()
            ),
            href: format!("/tenants/{}", t.name),
            alert: None,
        });
    }
    // Stable: by severity, then as found (pool order, ramps, reviews, flags, tenants).
    out.sort_by_key(|c| c.severity);
    out
}

/// The members of `pool` whose last minute's share is off by an alert rule's measure, when
/// its newest sample is fresh.
fn shares(now_ms: i64, pool: &PoolCard, out: &mut Vec<Concern>) {
    let (Some(draws), Some(window)) = (pool.draws_minute, pool.window_seconds) else { return };
    let fresh = pool.length.last().is_some_and(|p| now_ms - p.at_ms < SAMPLE_FRESH_MS);
    if window <= 0.0 || !fresh {
        return;
    }
    let rate = draws as f64 / window;
    for s in &pool.shares {
        let Some(actual) = s.actual_minute else { continue };
        let off = actual - s.expected_minute;
        let relative = if s.expected_minute > 0.0 { off / s.expected_minute } else { 0.0 };
        let alert = if off.abs() > SHARE_POINTS && rate > SHARE_POINTS_RATE {
            "TesseraPoolShareDeviation (after 10 min)"
        } else if relative.abs() > SHARE_RELATIVE && rate > SHARE_RELATIVE_RATE {
            "TesseraPoolShareOffRelative (after 10 min)"
        } else {
            continue;
        };
        out.push(Concern {
            severity: Severity::Warning,
            kind: "share".into(),
            text: format!(
                "Member {} of pool {} got {:.1} % of the last minute's draws against {:.1} % expected ({}{:.1} points).",
                s.member,
                pool.name,
                actual * 100.0,
                s.expected_minute * 100.0,
                if off >= 0.0 { "+" } else { "−" },
                off.abs() * 100.0
            ),
            href: format!("/pools/{}", pool.name),
            alert: Some(alert.to_owned()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::dashboard::{DrawsBySource, LengthPoint, MemberShare};

    const NOW: i64 = 1_796_223_840_000;
    use crate::api::MemberView;

    fn pool(draws: u64, shares: &[(&str, f64, f64)], members: &[(&str, &str)]) -> PoolCard {
        PoolCard {
            name: "cn-pay".into(),
            kind: "channels".into(),
            length: vec![LengthPoint { at_ms: NOW - 10_000, length: 1024 }],
            truncated: false,
            shares: shares
                .iter()
                .map(|(m, expected, actual)| MemberShare {
                    member: (*m).into(),
                    expected_minute: *expected,
                    actual_minute: Some(*actual),
                    expected_hour: *expected,
                    actual_hour: Some(*actual),
                    draws_minute: Some((actual * draws as f64) as u64),
                    draws_hour: 0,
                })
                .collect(),
            window_seconds: Some(60.0),
            draws_minute: Some(draws),
            draws_hour: None,
            refills_minute: None,
            refills_hour: None,
            refills_per_minute: None,
            served_here: DrawsBySource::default(),
            members: members
                .iter()
                .map(|(c, state)| MemberView {
                    channel: (*c).into(),
                    state: (*state).into(),
                    pinned: None,
                    base_weight: 30,
                    effective_weight: 8,
                })
                .collect(),
        }
    }

    #[test]
    fn a_decaying_member_still_drawn_above_its_share_is_named_with_the_alert() {
        let p = pool(600, &[("WECHAT_B", 0.103, 0.30), ("ALIPAY_A", 0.897, 0.70)], &[("WECHAT_B", "decaying")]);
        let found = concerns(NOW, &[p], &[], &[], &[], &[], None, &[]);
        let texts: Vec<&str> = found.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(found.len(), 3, "{texts:?}");
        assert!(texts[0].contains("WECHAT_B") && texts[0].contains("+19.7 points"), "{texts:?}");
        assert_eq!(found[0].alert.as_deref(), Some("TesseraPoolShareDeviation (after 10 min)"));
        assert!(texts[2].contains("is decaying: effective weight 8 of 30"), "{texts:?}");
        assert_eq!(found[2].href, "/channels/WECHAT_B");
        // An old sample says nothing about the last minute: the shares are left out.
        let mut stale = pool(600, &[("WECHAT_B", 0.103, 0.30), ("ALIPAY_A", 0.897, 0.70)], &[]);
        stale.length = vec![LengthPoint { at_ms: NOW - 300_000, length: 1024 }];
        assert_eq!(concerns(NOW, &[stale], &[], &[], &[], &[], None, &[]), vec![]);
        // What could not be read is said, not hidden.
        let unread = concerns(NOW, &[], &[], &[], &[], &[], None, &["the ramps".to_owned()]);
        assert_eq!(unread[0].text, "Could not read the ramps: this list may be missing some.");
    }

    #[test]
    fn quiet_pools_and_small_deviations_are_not_listed() {
        // Off by 20 points, but half a draw a second: the alert would not fire either.
        let slow = pool(30, &[("A", 0.5, 0.7), ("B", 0.5, 0.3)], &[("A", "healthy")]);
        // 5 % of a 50 % share, at 10 a second: within both measures.
        let near = pool(600, &[("A", 0.5, 0.525), ("B", 0.5, 0.475)], &[]);
        assert_eq!(concerns(NOW, &[slow, near], &[], &[], &[], &[], None, &[]), vec![]);
        // A 5 % canary drawn at 7 %: 40 % off relative to its share, but at 10 draws a
        // second, not over 10 as the rule asks; at 11 a second it is listed.
        let at_ten = pool(600, &[("A", 0.95, 0.93), ("C", 0.05, 0.07)], &[]);
        assert_eq!(concerns(NOW, &[at_ten], &[], &[], &[], &[], None, &[]), vec![]);
        let canary = pool(660, &[("A", 0.95, 0.93), ("C", 0.05, 0.07)], &[]);
        // The large member, 2 % off its own share, is not.
        let found = concerns(NOW, &[canary], &[], &[], &[], &[], None, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].text.starts_with("Member C of pool cn-pay got 7.0 %"), "{found:?}");
        assert_eq!(found[0].alert.as_deref(), Some("TesseraPoolShareOffRelative (after 10 min)"));
    }

    #[test]
    fn tenants_over_the_threshold_and_critical_items_come_first() {
        let tenant = |name: &str, percent: Option<f64>| TenantQuota {
            name: name.into(),
            period: Some("2026-12".into()),
            total: 100,
            used: 0,
            reserved: 0,
            percent,
            open: 0,
            concurrency: 1,
            error: None,
        };
        let p = pool(600, &[], &[("X", "ejected")]);
        let tenants = [tenant("a", Some(79.9)), tenant("b", Some(80.0)), tenant("c", Some(101.0)), tenant("d", None)];
        let found = concerns(NOW, &[p], &tenants, &[], &[], &[], None, &[]);
        let kinds: Vec<(&str, Severity)> = found.iter().map(|c| (c.kind.as_str(), c.severity)).collect();
        assert_eq!(
            kinds,
            [("health", Severity::Critical), ("budget", Severity::Critical), ("budget", Severity::Warning)]
        );
        assert_eq!(found[1].href, "/tenants/c");
    }
}
