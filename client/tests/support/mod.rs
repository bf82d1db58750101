//! Helpers shared by the client's Redis tests: a key prefix per test removed afterwards
//! (SCAN + UNLINK, also on panic), a raw connection, and a TCP proxy to Redis that a test
//! can take down and bring back.
#![allow(dead_code)]

use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use client::{KeyPrefix, Keys};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

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

/// A TCP proxy to Redis that the test can take down (dropping every connection through it)
/// and bring back on the same port.
pub struct Proxy {
    pub addr: SocketAddr,
    upstream: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self { addr: listener.local_addr().unwrap(), upstream, tasks: Default::default() };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (upstream, tasks) = (self.upstream, self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Stops listening and cuts every connection.
    pub async fn stop(&self) {
        let tasks: Vec<_> = self.tasks.lock().unwrap().drain(..).collect();
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same port.
    pub async fn restart(&self) {
        let listener = TcpListener::bind(self.addr).await.expect("rebinding the proxy's port");
        self.serve(listener);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

pub fn redis_socket_addr() -> SocketAddr {
    use std::net::ToSocketAddrs;
    match redis::Client::open(redis_url()).unwrap().get_connection_info().addr.clone() {
        redis::ConnectionAddr::Tcp(host, port) => (host.as_str(), port).to_socket_addrs().unwrap().next().unwrap(),
        other => panic!("the fallback test needs Redis over plain TCP, not {other:?}"),
    }
}
