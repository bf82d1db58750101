//! Routes against a real Redis: a published route decides without asking Postgres, draws
//! from the pool its rule names, and an older version never replaces a newer one.

use std::collections::HashMap;

use crate::pool::{keep_filled, noon, pool, snapshot};
use crate::support::{handle_for, redis_url, KeyGuard};
use client::route::{RouteFailure, RouteName, RouteSnapshot};
use client::{Clock, PoolAdmin, Pools, RouteAdmin, Routes};
use engine::route::{Attributes, Loose};
use engine::Ordering;
use serde_json::json;

fn loose(v: serde_json::Value) -> Loose {
    serde_json::from_value(v).unwrap()
}

fn route(version: u64, v: serde_json::Value) -> RouteSnapshot {
    RouteSnapshot::parse(version, &loose(v)).unwrap()
}

fn attrs(v: serde_json::Value) -> Attributes {
    Attributes::parse(&loose(v)).unwrap()
}

fn by_amount(version: u64, large_pool: &str) -> RouteSnapshot {
    route(
        version,
        json!({
            "rules": [{"name": "large", "when": {"amount": {"gte": "5000"}}, "pool": large_pool}],
            "default_pool": "small"
        }),
    )
}

#[tokio::test]
async fn draws_land_in_the_pool_of_the_rule_that_matched_and_the_default_pool_otherwise() {
    // Arrange: two pools of distinct members and a route between them
    let guard = KeyGuard::new("rt");
    let clock = Clock::manual(noon());
    let admin = PoolAdmin::new(handle_for(&redis_url()), guard.keys.clone(), clock.clone());
    for (name, spec) in [("large", "L1=1,L2=1"), ("small", "S1=1,S2=1")] {
        assert!(admin.publish(&pool(name), &snapshot(spec, 100, 10, Ordering::Smooth)).await.unwrap());
        keep_filled(&admin, &pool(name)).await;
    }
    let name = RouteName::parse("checkout").unwrap();
    assert!(RouteAdmin::new(handle_for(&redis_url()), guard.keys.clone())
        .publish(&name, &by_amount(1, "large"))
        .await
        .unwrap());
    let pools = Pools::new(handle_for(&redis_url()), guard.keys.clone(), clock, HashMap::new(), None);
    let routes = Routes::new(handle_for(&redis_url()), guard.keys.clone());

    // Act
    let large = routes.draw(&pools, &name, &attrs(json!({"amount": "5000"})), None).await.unwrap();
    let small = routes.draw(&pools, &name, &attrs(json!({"amount": "4999.99", "colour": "red"})), None).await.unwrap();
    let sticky = routes.draw(&pools, &name, &attrs(json!({"amount": 7000})), Some(b"customer-7")).await.unwrap();

    // Assert
    assert_eq!((large.decision.rule.as_deref(), large.decision.pool.as_str()), (Some("large"), "large"));
    assert!(large.draw.member.starts_with('L'), "{large:?}");
    assert_eq!((small.decision.rule.as_deref(), small.decision.pool.as_str()), (None, "small"));
    assert!(small.draw.member.starts_with('S'), "{small:?}");
    assert_eq!(sticky.decision.route_version, 1);
    assert!(sticky.draw.member.starts_with('L'), "{sticky:?}");
}

#[tokio::test]
async fn a_newer_version_is_seen_after_a_recheck_an_older_one_is_refused_and_an_unknown_route_is_named() {
    // Arrange
    let guard = KeyGuard::new("rt");
    let admin = RouteAdmin::new(handle_for(&redis_url()), guard.keys.clone());
    let routes = Routes::new(handle_for(&redis_url()), guard.keys.clone());
    let name = RouteName::parse("checkout").unwrap();
    assert!(admin.publish(&name, &by_amount(1, "large")).await.unwrap());
    let big = attrs(json!({"amount": 9000}));
    let before = routes.decide(&name, &big).await.unwrap();

    // Act
    let newer = admin.publish(&name, &by_amount(3, "larger")).await.unwrap();
    routes.recheck(&name);
    let after = routes.decide(&name, &big).await.unwrap();
    let older = admin.publish(&name, &by_amount(2, "stale")).await.unwrap();
    routes.recheck(&name);
    let still = routes.decide(&name, &big).await.unwrap();
    let unknown = routes.decide(&RouteName::parse("nowhere").unwrap(), &big).await.unwrap_err();

    // Assert
    assert_eq!((before.route_version, before.pool.as_str()), (1, "large"));
    assert!(newer);
    assert_eq!((after.route_version, after.pool.as_str()), (3, "larger"));
    assert!(!older, "an older version must not replace a newer one");
    assert_eq!((still.route_version, still.pool.as_str()), (3, "larger"));
    assert_eq!(admin.version(&name).await.unwrap(), Some(3));
    assert!(matches!(unknown, RouteFailure::UnknownRoute(_)), "{unknown:?}");
}
