//! `tessera bench`: throughput and correctness runs of the data plane, each against a
//! baseline measured in the same run, under a key prefix of its own that is removed after.

pub mod draw;
pub mod publish;
pub mod quota;
pub mod recover;

use client::{KeyPrefix, Keys, RedisHandle};

/// A fresh key prefix for one benchmark run.
pub(crate) fn run_prefix(kind: &str) -> KeyPrefix {
    let tag: u32 = rand::random();
    KeyPrefix::parse(&format!("bench-{kind}-{tag:08x}")).expect("valid prefix")
}

/// Removes every key of a run (SCAN + UNLINK under its prefix; never FLUSHDB).
pub(crate) async fn remove_keys(redis: &RedisHandle, keys: &Keys) -> anyhow::Result<u64> {
    let mut conn = redis.connection().await?;
    let mut cursor: u64 = 0;
    let mut removed = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(keys.scan_pattern())
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !batch.is_empty() {
            removed += batch.len() as u64;
            redis::cmd("UNLINK").arg(&batch).query_async::<()>(&mut conn).await?;
        }
        if next == 0 {
            return Ok(removed);
        }
        cursor = next;
    }
}

/// The value at quantile `q` (0..=1) of sorted durations, in microseconds.
pub(crate) fn quantile_us(sorted: &[std::time::Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}
