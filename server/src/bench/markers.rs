//! `tessera bench quota`, its done-marker phase: Redis bytes per finished request for the
//! idempotency window's compact markers, against the key-per-request markers they replace,
//! measured in the same run (`MEMORY USAGE`, every element sampled).

use anyhow::Context;
use chrono::{DateTime, DurationRound, Utc};
use client::quota::{RequestId, ReserveOutcome, SettleOutcome, TenantId, TokenCount, Tokens};
use client::{Clock, Keys, Quotas, RedisHandle};
use serde::Serialize;

/// What the phase measured.
#[derive(Debug, Serialize)]
pub struct MarkerReport {
    /// Finished requests per window.
    pub markers_per_window: u64,
    /// Bytes per finished request in a window sized by the one before (the steady state).
    pub marker_bytes_per_request: f64,
    /// The same in a tenant's first window (sized for none: it grows its buckets, four
    /// times as many at a time, as it fills).
    pub marker_bytes_per_request_first_window: f64,
    /// A key of its own per request, as markers were kept before windows.
    pub legacy_marker_bytes_per_request: f64,
    /// The windows whose markers Redis holds at any time (each window's hashes expire when
    /// the next one ends).
    pub windows_held: u64,
}

const WINDOW_MS: i64 = 3_600_000;

/// A request id shaped like a UUID (36 characters), the `i`-th of the run.
fn uuid_like(i: u64) -> String {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let tail = i.wrapping_mul(0x2545_F491_4F6C_DD1D) & 0xffff_ffff_ffff;
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{tail:012x}", x >> 32, (x >> 16) & 0xffff, x & 0xfff, (x >> 20) & 0xfff)
}

async fn memory_of(conn: &mut client::RedisConnection, keys: &[String]) -> anyhow::Result<u64> {
    let mut total = 0;
    for key in keys {
        let used: Option<u64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(conn).await?;
        total += used.unwrap_or(0);
    }
    Ok(total)
}

/// The bucket hashes of `tenant`'s current window of markers, in every layout it grew to.
async fn window_keys(conn: &mut client::RedisConnection, keys: &Keys, tenant: &str) -> anyhow::Result<Vec<String>> {
    let (start_field, buckets_field) = Keys::QUOTA_MARKER_WINDOWS[0];
    let [current, previous] = Keys::QUOTA_MARKER_LAYOUTS;
    let (gen, start, buckets, k0, k1): (String, i64, u64, Option<i64>, Option<i64>) = redis::cmd("HMGET")
        .arg(keys.quota_state(tenant))
        .arg("gen")
        .arg(start_field)
        .arg(buckets_field)
        .arg(current)
        .arg(previous)
        .query_async(conn)
        .await?;
    let layout = client::keys::marker_layout(start, &[k0, k1]);
    Ok(keys.quota_done_window(tenant, &gen, start, buckets, layout))
}

/// Finishes `per_window` requests in each of two windows (a day ahead of now, by a hand-set
/// clock), then writes as many markers the old way.
pub async fn measure(redis: &RedisHandle, keys: &Keys, per_window: u64) -> anyhow::Result<MarkerReport> {
    let start: DateTime<Utc> = (Utc::now() + chrono::Duration::days(1)).duration_trunc(chrono::Duration::hours(1))?;
    let clock = Clock::manual(start);
    let quotas = Quotas::with_clock(redis.clone(), keys.clone(), clock.clone(), None);
    let tenant = TenantId::parse("bench-markers").expect("valid");
    quotas.publish(&tenant, &super::quota::tenant_quota(u64::MAX >> 12)).await?;
    let mut conn = redis.connection().await.context("connecting to redis")?;
    let mut bytes = Vec::new();
    let mut first = Vec::new();
    for window in 0..2u64 {
        clock.set(start + chrono::Duration::hours(window as i64));
        let mut workers = Vec::new();
        for worker in 0..16 {
            let (quotas, tenant) = (quotas.clone(), tenant.clone());
            workers.push(tokio::spawn(async move {
                for i in (worker..per_window).step_by(16) {
                    let id = RequestId::parse(&uuid_like(window * per_window + i)).expect("valid");
                    let tokens = Tokens::parse("tokens", 10).expect("valid");
                    match quotas.reserve(&tenant, &id, tokens).await? {
                        ReserveOutcome::Reserved(_) => {}
                        other => anyhow::bail!("marker reserve answered {other:?}"),
                    }
                    match quotas.settle(&tenant, &id, TokenCount::parse("actual", 7).expect("valid"), false).await? {
                        SettleOutcome::Settled { .. } => {}
                        other => anyhow::bail!("marker settle answered {other:?}"),
                    }
                }
                anyhow::Ok(())
            }));
        }
        for worker in workers {
            worker.await.context("marker worker panicked")??;
        }
        let hashes = window_keys(&mut conn, keys, tenant.as_str()).await?;
        if window == 0 {
            first = hashes.clone();
        }
        bytes.push(memory_of(&mut conn, &hashes).await? as f64 / per_window as f64);
    }
    // The markers of before: a key per request, holding "state|amount|deadline|parts|actual|
    // charged|gen" (the same outcome as above), expiring with the retention.
    let deadline = start.timestamp_millis() + 600_000;
    let mut legacy = Vec::with_capacity(per_window as usize);
    for i in 0..per_window {
        let key = format!("{}{}", keys.quota_done("bench-legacy"), uuid_like(i));
        redis::cmd("SET")
            .arg(&key)
            .arg(format!("settled|10|{deadline}|plan:10|7|plan:7|{:016x}", i))
            .arg("PXAT")
            .arg(deadline + 62 * 86_400_000)
            .query_async::<()>(&mut conn)
            .await?;
        legacy.push(key);
    }
    let legacy_bytes = memory_of(&mut conn, &legacy).await? as f64 / per_window as f64;
    // Two windows are held at most: a window's hashes expire when the next one ends.
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(&first[0]).query_async(&mut conn).await?;
    let windows_held = ((expires - start.timestamp_millis()) / WINDOW_MS) as u64;
    Ok(MarkerReport {
        markers_per_window: per_window,
        marker_bytes_per_request: bytes[1],
        marker_bytes_per_request_first_window: bytes[0],
        legacy_marker_bytes_per_request: legacy_bytes,
        windows_held,
    })
}
