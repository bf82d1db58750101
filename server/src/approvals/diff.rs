//! What a change request shows its reviewers: the pool's configuration before and after,
//! field by field, the traffic it moves, the risk rules it meets, and the engine's preview
//! of both weights (shares, tickets per batch, window deviation, longest run), computed
//! once when it is proposed and stored with it, so every reviewer sees the same.

use client::pool::PoolSnapshot;
use serde_json::{json, Value};

use chrono::NaiveTime;
use engine::Weights;

use super::moved_percent;

/// The diff of a request whose operation turns `before` into `after` under `policy`
/// (`undoes`: the versions a restore undoes).
pub fn diff(
    before: &PoolSnapshot,
    after: &PoolSnapshot,
    policy: Option<&api::changes::Policy>,
    undoes: Option<&[api::pools::PoolVersion]>,
) -> Value {
    let mut diff = json!({
        "before": before.weights,
        "after": after.weights,
        "moved_percent": moved_percent(&effective(before, None), &effective(after, None)),
        "risk": policy.map(|p| risks(p, before, after)).unwrap_or_default(),
        "changes": field_changes(before, after),
        "preview": {"before": preview(before), "after": preview(after)},
    });
    if let Some(undoes) = undoes {
        diff["undoes"] = json!(undoes
            .iter()
            .map(|v| json!({"version": v.version, "action": v.action,
            "actor": v.actor, "at": v.at}))
            .collect::<Vec<_>>());
    }
    diff
}

/// What each channel carries outside peak windows (`None`) or inside the peak window
/// starting at a time: a tiers pool's channels weighted by their tier's share.
fn effective(s: &PoolSnapshot, window: Option<NaiveTime>) -> Weights {
    let mut s = s.clone();
    if let Some(w) = window.and_then(|t| s.peak_windows.iter().find(|w| w.start() == t)).and_then(|w| w.weights()) {
        s.weights = w.clone();
    }
    s.channels()
}

/// A channel's own entries in a pool outside peak windows (`None`) or inside the one
/// starting at a time: its weight (a tiers pool: its tier's weight), and in a tiers pool
/// its tier and weight within it.
fn entry(s: &PoolSnapshot, window: Option<NaiveTime>, member: &str) -> (Option<u64>, Option<(String, u64)>) {
    let top = window
        .and_then(|t| s.peak_windows.iter().find(|w| w.start() == t))
        .and_then(|w| w.weights())
        .unwrap_or(&s.weights);
    let weight = |w: &Weights, name: &str| w.index_of(name).map(|i| w.weight(i));
    match s.kind {
        client::pool::PoolKind::Channels => (weight(top, member), None),
        client::pool::PoolKind::Tiers => match s.tiers.iter().find(|(_, ch)| ch.index_of(member).is_some()) {
            Some((tier, ch)) => {
                (weight(top, tier.as_str()), Some((tier.as_str().to_owned(), weight(ch, member).unwrap_or(0))))
            }
            None => (None, None),
        },
    }
}

/// Each channel's share of `w` (0 when absent).
fn share(w: &Weights, member: &str) -> f64 {
    w.index_of(member).map_or(0.0, |i| w.weight(i) as f64 / w.total().max(1) as f64)
}

/// The risk rules of `policy` a change from `before` to `after` meets, in words, measured
/// on what each channel carries (a tiers pool's channels by their tier's share), outside
/// and inside every peak window of either side: more than `moved_percent_over` % of the
/// traffic moved; or a channel carrying more than `member_share_over` % of it now whose own
/// entries (its weight, tier or weight in a window) or cap change. Each met rule is named; together they add one
/// approval.
pub fn risks(policy: &api::changes::Policy, before: &PoolSnapshot, after: &PoolSnapshot) -> Vec<String> {
    let mut regimes: Vec<Option<NaiveTime>> = vec![None];
    for w in before.peak_windows.iter().chain(&after.peak_windows) {
        if !regimes.contains(&Some(w.start())) {
            regimes.push(Some(w.start()));
        }
    }
    let pairs: Vec<(Option<NaiveTime>, Weights, Weights)> =
        regimes.into_iter().map(|r| (r, effective(before, r), effective(after, r))).collect();
    let mut met = Vec::new();
    if let Some(limit) = policy.moved_percent_over {
        let most = pairs.iter().map(|(r, b, a)| (moved_percent(b, a), r)).max_by(|x, y| x.0.total_cmp(&y.0));
        if let Some((moved, regime)) = most.filter(|(m, _)| *m > limit) {
            let when = regime.map(|t| format!(" in the peak window from {}", t.format("%H:%M"))).unwrap_or_default();
            met.push(format!("moves {moved} % of the traffic{when}, more than {limit} %"));
        }
    }
    if let Some(limit) = policy.member_share_over {
        let now = &pairs[0].1;
        for member in now.members() {
            let carried = share(now, member) * 100.0;
            let touched = pairs.iter().any(|(r, _, _)| entry(before, *r, member) != entry(after, *r, member))
                || before.caps.get(member) != after.caps.get(member)
                || window_cap(before, member) != window_cap(after, member);
            if carried > limit && touched {
                met.push(format!("changes {member}, which carries {carried:.2} % of the traffic, more than {limit} %"));
            }
        }
    }
    met
}

/// Each configuration field that differs: `{"field", "before", "after"}` (absent: null),
/// in the order of the snapshot's fields.
pub fn field_changes(before: &PoolSnapshot, after: &PoolSnapshot) -> Vec<Value> {
    json_changes(&Value::Object(configured(before)), &Value::Object(configured(after)))
}

/// Each field of two JSON objects (an entity before and after; null: absent) that differs,
/// besides its version and times: `{"field", "before", "after"}`.
pub fn json_changes(before: &Value, after: &Value) -> Vec<Value> {
    let empty = serde_json::Map::new();
    let (b, a) = (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
    let bookkeeping = |f: &String| matches!(f.as_str(), "version" | "updated_at" | "created_at");
    let mut fields: Vec<&String> = b.keys().filter(|f| !bookkeeping(f)).collect();
    fields.extend(a.keys().filter(|k| !b.contains_key(*k) && !bookkeeping(k)));
    fields
        .into_iter()
        .filter(|f| b.get(*f) != a.get(*f))
        .map(|f| json!({"field": f, "before": b.get(f), "after": a.get(f)}))
        .collect()
}

/// A snapshot as configured: its fields without the published version.
fn configured(s: &PoolSnapshot) -> serde_json::Map<String, Value> {
    let mut fields = match serde_json::to_value(s) {
        Ok(Value::Object(fields)) => fields,
        _ => serde_json::Map::new(),
    };
    fields.remove("version");
    fields
}

/// The engine's preview of a snapshot's weights with its batch size and ordering (null
/// when the batch size is not one the engine takes, which validation has ruled out).
fn preview(s: &PoolSnapshot) -> Value {
    match engine::BatchSize::new(u64::from(s.batch_size), client::pool::MAX_BATCH) {
        Ok(batch) => json!(engine::preview::preview(&s.weights, batch, s.ordering)),
        Err(_) => Value::Null,
    }
}

/// A member's short-window cap and the window's length, if it has one: a change of either
/// touches the member.
fn window_cap(snapshot: &PoolSnapshot, member: &str) -> Option<(u32, u64)> {
    let window = snapshot.window_caps.as_ref()?;
    window.caps.get(member).map(|cap| (window.minutes, *cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(weights: &str, caps: &[(&str, u64)]) -> PoolSnapshot {
        let weights = engine::Weights::parse_spec(weights).unwrap();
        let mut s: PoolSnapshot = serde_json::from_value(json!({
            "version": 3, "kind": "channels", "weights": weights, "batch_size": 100, "low_water": 10,
            "ordering": "smooth", "timezone": "UTC", "eject_rebuild_percent": 50
        }))
        .unwrap();
        s.caps = caps.iter().map(|(m, c)| ((*m).to_owned(), *c)).collect();
        s
    }

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
        let (before, small, big) =
            (pool("A=45,B=30,C=25", &[]), pool("A=45,B=31,C=25", &[]), pool("A=5,B=60,C=25", &[]));
        assert!(risks(&policy(Some(10.0), None), &before, &small).is_empty());
        assert_eq!(risks(&policy(Some(10.0), None), &before, &big).len(), 1);
        let heavy = risks(&policy(None, Some(40.0)), &before, &big);
        assert_eq!(heavy.len(), 1, "{heavy:?}");
        assert!(heavy[0].contains('A'), "{heavy:?}");
        assert!(risks(&policy(None, Some(40.0)), &before, &small).is_empty(), "A itself did not change");
        assert!(risks(&policy(None, Some(50.0)), &before, &big).is_empty(), "no member above 50 %");
        assert!(risks(&policy(None, None), &before, &big).is_empty());
    }

    #[test]
    fn caps_and_peak_window_weights_meet_the_rules_too() {
        let before = pool("A=45,B=30,C=25", &[]);
        let capped = pool("A=45,B=30,C=25", &[("A", 1)]);
        let met = risks(&policy(None, Some(40.0)), &before, &capped);
        assert_eq!(met.len(), 1, "a cap on the heavy member: {met:?}");
        assert!(risks(&policy(None, Some(40.0)), &before, &pool("A=45,B=30,C=25", &[("C", 1)])).is_empty());
        let windowed = |minutes: u32, member: &str| PoolSnapshot {
            window_caps: Some(engine::caps::WindowCaps { minutes, caps: [(member.to_owned(), 1)].into() }),
            ..before.clone()
        };
        let met = risks(&policy(None, Some(40.0)), &before, &windowed(1, "A"));
        assert_eq!(met.len(), 1, "a window cap on the heavy member: {met:?}");
        assert_eq!(risks(&policy(None, Some(40.0)), &windowed(10, "A"), &windowed(60, "A")).len(), 1, "its window");
        assert!(risks(&policy(None, Some(40.0)), &before, &windowed(1, "C")).is_empty());
        let mut peaked = before.clone();
        peaked.peak_windows = serde_json::from_value(json!([{"start": "19:00", "end": "23:00", "multiplier": 2,
            "weights": [{"member": "A", "weight": 5}, {"member": "B", "weight": 70}, {"member": "C", "weight": 25}]}]))
        .unwrap();
        let met = risks(&policy(Some(10.0), None), &before, &peaked);
        assert_eq!(met.len(), 1, "{met:?}");
        assert!(met[0].contains("peak window from 19:00"), "{met:?}");
    }

    #[test]
    fn a_tiers_pool_is_measured_on_its_channels() {
        let tiers = |n1: u64| -> PoolSnapshot {
            serde_json::from_value(json!({
                "version": 1, "kind": "tiers", "batch_size": 100, "low_water": 10, "ordering": "smooth", "timezone": "UTC",
                "eject_rebuild_percent": 50,
                "weights": [{"member": "G", "weight": 50}, {"member": "N", "weight": 50}],
                "tiers": {"G": [{"member": "G1", "weight": 1}], "N": [{"member": "N1", "weight": n1}, {"member": "N2", "weight": 1}]}
            }))
            .unwrap()
        };
        let met = risks(&policy(Some(10.0), None), &tiers(1), &tiers(9));
        assert_eq!(met.len(), 1, "N1 goes from 25 % to 45 % of the traffic: {met:?}");
    }

    #[test]
    fn the_diff_names_each_changed_field_and_previews_both_sides() {
        let before = pool("A=60,B=40", &[]);
        let after = pool("A=60,B=40", &[("A", 500)]);
        let d = diff(&before, &after, None, None);
        let changes = d["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0]["field"], "caps");
        assert_eq!(changes[0]["after"]["A"], 500);
        assert_eq!(d["moved_percent"], 0.0);
        let previewed = &d["preview"]["after"]["members"];
        assert_eq!(previewed[0]["batch_min"], 60, "{previewed}");
        let moved = diff(&before, &pool("A=40,B=60", &[]), None, None);
        assert_eq!(moved["moved_percent"], 20.0);
        assert_eq!(moved["preview"]["after"]["members"][1]["batch_max"], 60);
        assert!(field_changes(&before, &before).is_empty());
    }
}
