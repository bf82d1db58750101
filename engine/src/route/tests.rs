use proptest::prelude::*;
use serde_json::json;

use super::*;

fn loose(v: serde_json::Value) -> Loose {
    serde_json::from_value(v).unwrap()
}

fn route(v: serde_json::Value) -> Route {
    Route::parse(&loose(v)).unwrap()
}

fn refused(v: serde_json::Value) -> RouteError {
    Route::parse(&loose(v)).unwrap_err()
}

fn attrs(v: serde_json::Value) -> Attributes {
    Attributes::parse(&loose(v)).unwrap()
}

fn sample() -> Route {
    route(json!({
        "rules": [
            {"name": "small", "when": {"amount": {"lt": "1000"}}, "pool": "small-pay"},
            {"name": "mid-usd", "when": {"amount": {"gte": 1000, "lt": "5000"}, "currency": {"in": ["usd", "EUR"]}}, "pool": "acq-mid"},
            {"name": "large", "when": {"amount": {"gte": "5000"}}, "pool": "acq-large"},
            {"name": "sg-cards", "when": {"country": {"equals": "sg"}, "method": {"prefix": "card"}}, "pool": "sg-pay"}
        ],
        "default_pool": "general"
    }))
}

fn pool_for(route: &Route, v: serde_json::Value) -> (Option<String>, String) {
    let d = route.decide(&attrs(v));
    (d.rule.map(|(_, n)| n.to_owned()), d.pool.to_owned())
}

#[test]
fn amounts_on_both_sides_of_each_boundary_pick_the_rule_of_their_side() {
    let r = sample();
    let cases = [
        (json!("999.99"), Some("small")),
        (json!(999.99), Some("small")),
        (json!(1000), Some("mid-usd")),
        (json!("1000.00"), Some("mid-usd")),
        (json!("4999.99"), Some("mid-usd")),
        (json!(5000), Some("large")),
        (json!("5000.01"), Some("large")),
    ];
    for (amount, rule) in cases {
        let (got, _) = pool_for(&r, json!({"amount": amount, "currency": "USD"}));
        assert_eq!(got.as_deref(), rule, "{amount}");
    }
    // Without the currency the mid rule does not hold; nothing after it catches 1000..5000.
    assert_eq!(pool_for(&r, json!({"amount": 1000})), (None, "general".into()));
    assert_eq!(pool_for(&r, json!({"amount": "1200", "currency": "gbp"})), (None, "general".into()));
}

#[test]
fn string_conditions_match_by_equals_in_and_prefix_and_unknown_attributes_are_ignored() {
    let r = sample();
    assert_eq!(
        pool_for(&r, json!({"country": "SG", "method": "card_visa", "campaign": "x"})),
        (Some("sg-cards".into()), "sg-pay".into())
    );
    assert_eq!(pool_for(&r, json!({"country": "sg", "method": "wallet"})), (None, "general".into()));
    assert_eq!(pool_for(&r, json!({"method": "card"})), (None, "general".into()), "country missing");
    assert_eq!(pool_for(&r, json!({})), (None, "general".into()));
}

#[test]
fn a_route_reads_back_from_its_canonical_form() {
    let r = sample();
    let canonical = serde_json::to_value(&r).unwrap();
    assert_eq!(canonical["rules"][1]["when"]["currency"]["in"], json!(["USD", "EUR"]));
    assert_eq!(canonical["rules"][1]["when"]["amount"], json!({"gte": "1000", "lt": "5000"}));
    let again: Route = serde_json::from_value(canonical).unwrap();
    assert_eq!(again, r);
    assert_eq!(route(json!({"rules": [{"when": {}, "pool": "p"}], "default_pool": "d"})).rules()[0].name(), "rule-1");
    assert!(r.to_string().contains("2. mid-usd: amount ≥ 1000 and < 5000 and currency in USD, EUR → acq-mid"), "{r}");
}

#[test]
fn invalid_rules_are_refused_naming_the_field() {
    let cases = [
        (json!({"rules": []}), "default_pool"),
        (json!({"default_pool": "d"}), "rules"),
        (json!({"rules": [], "default_pool": "d", "extra": 1}), "extra"),
        (
            json!({"rules": [{"when": {"amount": {"gte": "ten"}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.amount.gte",
        ),
        (
            json!({"rules": [{"when": {"amount": {"gte": true}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.amount.gte",
        ),
        (
            json!({"rules": [{"when": {"amount": {"equals": "5"}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.amount.equals",
        ),
        (
            json!({"rules": [{"when": {"amount": {"gte": 5, "lt": 5}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.amount",
        ),
        (
            json!({"rules": [{"when": {"amount": {"gte": 5, "gt": 4}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.amount",
        ),
        (
            json!({"rules": [{"when": {"currency": {"in": ["US"]}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.currency.in[0]",
        ),
        (
            json!({"rules": [{"when": {"currency": {"in": []}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.currency.in",
        ),
        (json!({"rules": [{"when": {"Bad": {"equals": "x"}}, "pool": "p"}], "default_pool": "d"}), "rules[0].when.Bad"),
        (
            json!({"rules": [{"when": {"m": {"equals": "x", "prefix": "y"}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.m",
        ),
        (json!({"rules": [{"when": {"m": {}}, "pool": "p"}], "default_pool": "d"}), "rules[0].when.m"),
        (json!({"rules": [{"when": {}, "pool": "bad pool"}], "default_pool": "d"}), "rules[0].pool"),
        (json!({"rules": [{"when": {}}], "default_pool": "d"}), "rules[0].pool"),
        (json!({"rules": [{"pool": "p"}], "default_pool": "d"}), "rules[0].when"),
        (
            json!({"rules": [{"name": "a", "when": {"m": {"equals": "1"}}, "pool": "p"}, {"name": "a", "when": {}, "pool": "p"}], "default_pool": "d"}),
            "rules[1].name",
        ),
        (
            json!({"rules": [{"when": {}, "pool": "p"}, {"when": {"m": {"equals": "1"}}, "pool": "q"}], "default_pool": "d"}),
            "rules[1]",
        ),
        (
            json!({"rules": [{"when": {"m": {"prefix": ""}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.m.prefix",
        ),
        (
            json!({"rules": [{"when": {"m": {"equals": "a\u{1}"}}, "pool": "p"}], "default_pool": "d"}),
            "rules[0].when.m.equals",
        ),
    ];
    for (body, field) in cases {
        let e = refused(body.clone());
        assert_eq!(e.field, field, "{body}: {e}");
    }
}

#[test]
fn request_attributes_are_checked_by_name_and_kind() {
    let bad = |v: serde_json::Value| Attributes::parse(&loose(v)).unwrap_err().field;
    assert_eq!(bad(json!({"amount": "12,5"})), "attributes.amount");
    assert_eq!(bad(json!({"amount": true})), "attributes.amount");
    assert_eq!(bad(json!({"currency": "dollars"})), "attributes.currency");
    assert_eq!(bad(json!({"Country": "SG"})), "attributes.Country");
    assert_eq!(bad(json!({"merchant": {"id": 1}})), "attributes.merchant");
    assert_eq!(bad(json!([1])), "attributes");
    assert_eq!(attrs(json!({"merchant": 42, "note": "x"})).len(), 2);
}

/// A rule of the reference: an amount range in cents `[lo, hi)` and a currency, each optional.
type PlainRule = (Option<(i64, i64)>, Option<String>);

/// A reference evaluator written the plain way: the first rule whose every condition holds.
fn reference(rules: &[PlainRule], amount: i64, currency: &str) -> Option<usize> {
    rules.iter().position(|(range, cur)| {
        range.is_none_or(|(lo, hi)| lo <= amount && amount < hi) && cur.as_ref().is_none_or(|c| c == currency)
    })
}

proptest! {
    #[test]
    fn decisions_follow_a_plain_first_match(
        specs in prop::collection::vec((prop::option::of((-100i64..100, 0i64..100)), prop::option::of(prop::sample::select(vec!["USD", "EUR", "SGD"]))), 0..8),
        amount in -150i64..150,
        currency in prop::sample::select(vec!["USD", "EUR", "SGD"]),
    ) {
        // Ranges are [lo, lo + width + 1) in cents; each rule has at least one condition.
        let rules: Vec<PlainRule> = specs
            .into_iter()
            .map(|(r, c)| (r.map(|(lo, w)| (lo, lo + w + 1)).or(if c.is_none() { Some((0, 1)) } else { None }), c.map(str::to_owned)))
            .collect();
        let cents = |c: i64| format!("{}{}.{:02}", if c < 0 { "-" } else { "" }, c.unsigned_abs() / 100, c.unsigned_abs() % 100);
        let body = json!({
            "rules": rules.iter().enumerate().map(|(i, (range, cur))| {
                let mut when = serde_json::Map::new();
                if let Some((lo, hi)) = range { when.insert("amount".into(), json!({"gte": cents(*lo), "lt": cents(*hi)})); }
                if let Some(c) = cur { when.insert("currency".into(), json!({"equals": c})); }
                json!({"name": format!("r{i}"), "when": when, "pool": format!("p{i}")})
            }).collect::<Vec<_>>(),
            "default_pool": "fallback",
        });
        let route = Route::parse(&loose(body)).unwrap();
        let decision = route.decide(&attrs(json!({"amount": cents(amount), "currency": currency})));
        prop_assert_eq!(decision.rule.map(|(i, _)| i), reference(&rules, amount, currency));
        let want_pool = reference(&rules, amount, currency).map_or("fallback".to_owned(), |i| format!("p{i}"));
        prop_assert_eq!(decision.pool, want_pool.as_str());
    }
}
