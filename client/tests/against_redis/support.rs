//! Helpers shared by the client's Redis tests: a key prefix per test removed afterwards
//! (SCAN + UNLINK, also on panic), a raw connection, and the address of Redis for a
//! [`testproxy::Proxy`] that a test can cut and restore.

use std::hash::{BuildHasher, RandomState};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use client::{KeyPrefix, Keys};

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Removes every key under its prefix when dropped, whether the test passed or panicked.
/// Uses the blocking Redis API so it also works while a panic unwinds out of a runtime.
pub struct KeyGuard {
    pub keys: Keys,
}

impl KeyGuard {
    /// Keys under a fresh prefix `<kind>-<random hex>`.
    pub fn new(kind: &str) -> Self {
        let random = RandomState::new().hash_one((SystemTime::now(), std::process::id()));
        let prefix = KeyPrefix::parse(&format!("{kind}-{random:016x}")).expect("a valid prefix");
        Self { keys: Keys::new(prefix) }
    }

    pub fn remove_keys(&self) -> redis::RedisResult<usize> {
        let mut conn = redis::Client::open(redis_url())?.get_connection()?;
        let keys = self.scan(&mut conn)?;
        if keys.is_empty() {
            return Ok(0);
        }
        redis::cmd("UNLINK").arg(&keys).query::<usize>(&mut conn)
    }

    /// Every key under the prefix (to show that nothing was written).
    pub fn all_keys(&self) -> Vec<String> {
        self.scan(&mut raw_connection()).unwrap()
    }

    fn scan(&self, conn: &mut redis::Connection) -> redis::RedisResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(self.keys.scan_pattern())
                .arg("COUNT")
                .arg(1000)
                .query(conn)?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        if let Err(e) = self.remove_keys() {
            eprintln!("could not remove the keys under {}: {e}", self.keys.prefix());
        }
    }
}

/// A plain synchronous connection for looking at keys the API does not show.
pub fn raw_connection() -> redis::Connection {
    redis::Client::open(redis_url()).unwrap().get_connection().expect("redis at REDIS_URL")
}

pub fn at(rfc3339: &str) -> DateTime<Utc> {
    rfc3339.parse().expect("an RFC 3339 time")
}

/// The `host:port` of Redis at `REDIS_URL`: the target of a [`testproxy::Proxy`] that a
/// test cuts to take Redis away from one client.
pub fn redis_address() -> String {
    match redis::Client::open(redis_url()).unwrap().get_connection_info().addr.clone() {
        redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        other => panic!("the fallback test needs Redis over plain TCP, not {other:?}"),
    }
}
