//! A quota script that fails part-way through a coalesced batch: Redis keeps a script's
//! writes up to the error, so the counters written through the scripts' cache must be
//! written too, matching the ledger entries and leases the batch's earlier requests made.

use super::*;

#[tokio::test]
async fn a_batch_that_fails_part_way_keeps_counters_that_match_what_it_wrote() {
    // Arrange: acme on a plan of 1,000 tokens; a batch of three reserves whose third is
    // malformed (a caller the client would never let through: the script fails on it)
    let h = harness(Clock::manual(noon()));
    let t = tenant("acme");
    publish(&h, &t, &plan(1_000)).await;
    let period = Period::of(noon());
    let k = h.keys();
    let mut call = client::scripts::quota().reserve.key(k.quota_meta("acme"));
    call.key(k.quota_state("acme"))
        .key(k.quota_ledger("acme"))
        .key(k.quota_leases("acme"))
        .key(k.quota_period("acme", &period.to_string()))
        .key(k.quota_period("acme", &period.previous().to_string()))
        .key(k.quota_usage("acme"))
        .key(k.quota_done("acme"))
        .key(k.quota_chunks("acme"))
        .arg(period.to_string())
        .arg(period.previous().to_string())
        .arg(noon().timestamp_millis().to_string());
    for (request, tokens) in [("p1", "100"), ("p2", "200"), ("p3", "not a number")] {
        call.arg(request).arg(tokens).arg("0").arg("").arg("");
    }
    let mut redis = crate::support::handle_for(&redis_url()).connection().await.unwrap();

    // Act
    let failed: redis::RedisResult<redis::Value> = call.invoke_async(&mut redis).await;

    // Assert: the call failed; the two reserves it made before the error hold their tokens,
    // their day's requests and their leases, as their ledger entries say
    assert!(failed.is_err(), "the malformed third request fails the call: {failed:?}");
    let ledger: Vec<String> = redis::cmd("HKEYS").arg(k.quota_ledger("acme")).query(&mut raw_connection()).unwrap();
    let mut ledger = ledger;
    ledger.sort();
    assert_eq!(ledger, vec!["p1", "p2"]);
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(bucket(&usage, "plan").reserved, 300, "the counters match the ledger");
    assert_eq!((usage.leases, usage.requests_today, usage.available), (2, 2, 700));

    // And the next call starts clean: the failed call's cached counters (kept by the
    // library between calls, not by a script) are neither written again nor read
    reserved(h.quotas.reserve(&t, &rid("p4"), tokens(50)).await.unwrap());
    let usage = h.quotas.usage(&t).await.unwrap();
    assert_eq!(bucket(&usage, "plan").reserved, 350);
    assert_eq!((usage.leases, usage.requests_today, usage.available), (3, 3, 650));
}
