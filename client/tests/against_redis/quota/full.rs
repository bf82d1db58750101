//! A Redis that refuses writes (full, with `maxmemory-policy noeviction`): the quota
//! library's writing functions are refused before they run, so nothing is half-applied,
//! and the readers (registered `no-writes`) still answer, as their scripts did.

use std::time::Duration;

use super::*;

#[tokio::test]
async fn a_full_redis_refuses_a_reserve_whole_and_still_answers_what_a_tenant_has_used() {
    // Arrange: a Redis of this test's own with acme on a plan of 1,000 tokens, 10 reserved
    let port = crate::support::free_ports_n(1)[0];
    let mut own = crate::support::Processes::new("full");
    own.spawn(port, &["--maxmemory-policy", "noeviction"]);
    own.wait_for(port, "redis", Duration::from_secs(10), |c| redis::cmd("PING").query::<String>(c).is_ok());
    let url = format!("redis://127.0.0.1:{port}");
    let h = harness_at(&url, Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000)).await;
    reserved(h.quotas.reserve(&t, &rid("r1"), tokens(10)).await.unwrap());
    let mut raw = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();

    // Act: Redis is full
    let () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").query(&mut raw).unwrap();
    let refused = h.quotas.reserve(&t, &rid("r2"), tokens(10)).await;
    let usage = h.quotas.usage(&t).await;

    // Assert: the reserve failed naming Redis's refusal and changed nothing; the usage read
    // answers
    let error = refused.expect_err("a full Redis refuses the reserve");
    assert!(error.to_string().contains("OOM"), "the error names Redis's refusal: {error}");
    let usage = usage.expect("reading the quota works on a full Redis");
    assert_eq!((bucket(&usage, "plan").reserved, usage.leases, usage.requests_today), (10, 1, 1));

    // And once Redis has room again, the same request id is reserved once
    let () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("0").query(&mut raw).unwrap();
    reserved(h.quotas.reserve(&t, &rid("r2"), tokens(10)).await.unwrap());
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!((bucket(&usage, "plan").reserved, usage.leases, usage.requests_today), (20, 2, 2));
}
