//! Helpers shared by the client's Redis tests: a key prefix per test removed afterwards
//! (SCAN + UNLINK on every primary, also on panic), a raw connection, and the address of
//! Redis for a [`testproxy::Proxy`] that a test can cut and restore.
//!
//! With `TESSERA_REDIS_CLUSTER_NODES` set (scripts/test sets it for the second run) the
//! tests run on that Redis Cluster: [`handle_for`] the standard URL answers a cluster
//! handle and [`raw_connection`] is a cluster connection. The two tests that cut Redis
//! through a proxy stay on the single Redis (a proxy in front of one cluster node cannot
//! cut a client that learns every node's own address); scripts/test skips them there.

use std::hash::{BuildHasher, RandomState};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use client::{KeyPrefix, Keys, RedisHandle, RedisTarget, RedisTimeouts};
use redis::ConnectionLike;

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The cluster's seed nodes when the tests run on a cluster.
pub fn cluster_nodes() -> Option<Vec<String>> {
    let raw = std::env::var("TESSERA_REDIS_CLUSTER_NODES").ok().filter(|v| !v.trim().is_empty())?;
    Some(raw.split(',').map(|n| n.trim().to_owned()).collect())
}

/// A handle on `url`; on the standard URL, the cluster's when the tests run on one.
pub fn handle_for(url: &str) -> RedisHandle {
    let timeouts = RedisTimeouts::default();
    match cluster_nodes() {
        Some(nodes) if url == redis_url() => {
            RedisHandle::on(RedisTarget::cluster(&nodes, timeouts).expect("valid cluster nodes"), timeouts)
        }
        _ => RedisHandle::new(redis::Client::open(url).expect("a valid redis url"), timeouts),
    }
}

/// A synchronous connection to the Redis the tests run on: the single server or the
/// cluster (whose connection sends each command to the node of its key's slot).
pub enum Raw {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Raw {
    fn inner(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Self::Single(c) => c,
            Self::Cluster(c) => c.as_mut(),
        }
    }
}

impl ConnectionLike for Raw {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.inner().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        self.inner().req_command(cmd)
    }

    fn supports_pipelining(&self) -> bool {
        matches!(self, Self::Single(_))
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }

    fn is_open(&self) -> bool {
        match self {
            Self::Single(c) => c.is_open(),
            Self::Cluster(c) => c.is_open(),
        }
    }
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
        let keys = self.all_keys_or_error()?;
        let mut conn = raw_connection();
        for key in &keys {
            redis::cmd("UNLINK").arg(key).query::<usize>(&mut conn)?;
        }
        Ok(keys.len())
    }

    /// Every key under the prefix (to show that nothing was written).
    pub fn all_keys(&self) -> Vec<String> {
        self.all_keys_or_error().unwrap()
    }

    /// `SCAN` on each primary (one server's, or every cluster primary's own keys).
    fn all_keys_or_error(&self) -> redis::RedisResult<Vec<String>> {
        let mut keys = Vec::new();
        for url in primary_urls()? {
            let mut conn = redis::Client::open(url)?.get_connection()?;
            let mut cursor: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(self.keys.scan_pattern())
                    .arg("COUNT")
                    .arg(1000)
                    .query(&mut conn)?;
                keys.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }
}

/// The URL of each primary: the single server, or each cluster primary (`CLUSTER SLOTS`).
pub fn primary_urls() -> redis::RedisResult<Vec<String>> {
    let Some(nodes) = cluster_nodes() else { return Ok(vec![redis_url()]) };
    let mut conn = redis::Client::open(nodes[0].as_str())?.get_connection()?;
    let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
    let mut urls: Vec<String> =
        client::nodes::primaries_of(slots)?.iter().map(|n| format!("redis://{}:{}", n.host, n.port)).collect();
    urls.sort();
    urls.dedup();
    Ok(urls)
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        if let Err(e) = self.remove_keys() {
            eprintln!("could not remove the keys under {}: {e}", self.keys.prefix());
        }
    }
}

/// A synchronous connection for looking at keys the API does not show.
pub fn raw_connection() -> Raw {
    match cluster_nodes() {
        Some(nodes) => Raw::Cluster(Box::new(
            redis::cluster::ClusterClient::new(nodes)
                .and_then(|c| c.get_connection())
                .expect("the cluster at TESSERA_REDIS_CLUSTER_NODES"),
        )),
        None => Raw::Single(redis::Client::open(redis_url()).unwrap().get_connection().expect("redis at REDIS_URL")),
    }
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

/// Redis processes of a test's own (children of the test, on loopback ports of its own,
/// in a folder of their own): killed, and the folder removed, on drop, also when a start
/// fails half way.
pub struct Processes {
    pub dir: std::path::PathBuf,
    /// By port.
    children: Vec<(u16, std::process::Child)>,
}

impl Processes {
    /// An empty set with a new folder named after `kind`.
    pub fn new(kind: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "tessera-{kind}-{:016x}",
            RandomState::new().hash_one((SystemTime::now(), std::process::id()))
        ));
        std::fs::create_dir_all(&dir).expect("a folder for the redis processes");
        Self { dir, children: Vec::new() }
    }

    /// Starts `redis-server` on `port` with `args` (no persistence, its log in the folder).
    pub fn spawn(&mut self, port: u16, args: &[&str]) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--logfile", &format!("redis-{port}.log")])
            .arg("--dir")
            .arg(&self.dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        self.children.push((port, child));
    }

    /// Starts a process of `command` (a sentinel, say) known by `port`.
    pub fn spawn_command(&mut self, port: u16, command: &mut std::process::Command) {
        self.children.push((port, command.stdout(std::process::Stdio::null()).spawn().expect("redis-server on PATH")));
    }

    /// Kills the process on `port` (SIGKILL: nothing is written or handed over).
    pub fn kill(&mut self, port: u16) {
        if let Some(i) = self.children.iter().position(|(p, _)| *p == port) {
            let (_, mut child) = self.children.remove(i);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `within` until the server on `port` is `ready`; a process that exited
    /// meanwhile (its port taken in between, say) fails at once, by name.
    pub fn wait_for(
        &mut self,
        port: u16,
        what: &str,
        within: std::time::Duration,
        ready: impl Fn(&mut redis::Connection) -> bool,
    ) {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            for (p, child) in &mut self.children {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the redis process on port {p} exited ({status}): see {}", self.dir.display());
                }
            }
            if let Ok(mut conn) = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap().get_connection() {
                if ready(&mut conn) {
                    return;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the redis process on port {port} did not come {what} within {within:?}: see {}", self.dir.display());
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain connection to the server on `port`.
pub fn node(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap().get_connection().expect("a redis server")
}

/// A three-primary Redis Cluster of a test's own on loopback ports of its own (no
/// persistence), for tests that move slots or fail a primary over and must not disturb
/// other tests; [`OwnCluster::with_replicas`] gives each primary a replica.
pub struct OwnCluster {
    /// The primaries at start, then the replicas.
    pub ports: Vec<u16>,
    processes: Processes,
}

impl OwnCluster {
    /// Three primaries.
    pub fn start() -> Self {
        Self::launch(3)
    }

    /// Three primaries with a replica each (`ports[3..]`; which replica follows which
    /// primary `redis-cli --cluster create` decides: read it from `CLUSTER NODES`).
    pub fn with_replicas() -> Self {
        Self::launch(6)
    }

    fn launch(nodes: usize) -> Self {
        let mut cluster = Self { ports: free_ports_n(nodes), processes: Processes::new("cluster") };
        for port in cluster.ports.clone() {
            let config = format!("nodes-{port}.conf");
            let args = ["--cluster-enabled", "yes", "--cluster-config-file", &config, "--cluster-node-timeout", "5000"];
            cluster.processes.spawn(port, &args);
        }
        for port in cluster.ports.clone() {
            cluster.wait_for(port, |c| redis::cmd("PING").query::<String>(c).is_ok(), "to answer PING");
        }
        let addresses: Vec<String> = cluster.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let replicas = if nodes == 6 { "1" } else { "0" };
        let output = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", replicas, "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(output.status.success(), "cluster create: {}", String::from_utf8_lossy(&output.stdout));
        for port in cluster.ports.clone() {
            cluster.wait_for(
                port,
                |c| redis::cmd("CLUSTER").arg("INFO").query::<String>(c).is_ok_and(|i| i.contains("cluster_state:ok")),
                "to say cluster_state:ok",
            );
        }
        for port in cluster.ports.clone().into_iter().skip(3) {
            cluster.wait_for(
                port,
                |c| {
                    redis::cmd("INFO")
                        .arg("replication")
                        .query::<String>(c)
                        .is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
                },
                "to replicate its primary",
            );
        }
        cluster
    }

    /// The seed URLs.
    pub fn nodes(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect()
    }

    /// A plain connection to one node.
    pub fn node(&self, port: u16) -> redis::Connection {
        node(port)
    }

    fn wait_for(&mut self, port: u16, ready: impl Fn(&mut redis::Connection) -> bool, what: &str) {
        self.processes.wait_for(port, what, std::time::Duration::from_secs(20), ready);
    }
}

/// Three loopback ports that are free together with their cluster bus ports (+10000).
pub fn free_ports() -> Vec<u16> {
    free_ports_n(3)
}

/// `n` consecutive loopback ports that are free together with their cluster bus ports.
pub fn free_ports_n(n: usize) -> Vec<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    for _ in 0..200 {
        let base = 20_000 + (RandomState::new().hash_one(SystemTime::now()) % 20_000) as u16;
        let ports: Vec<u16> = (0..n as u16).map(|i| base + i).collect();
        if ports.iter().all(|&p| free(p) && free(p + 10_000)) {
            return ports;
        }
    }
    panic!("no {n} free loopback ports for redis");
}

/// A primary, its replica and one Sentinel watching them (master name `tessera`, quorum 1,
/// a primary down after 1 s), on loopback ports of a test's own, no persistence: for tests
/// that fail the primary over.
pub struct OwnSentinel {
    /// The two data servers (the primary at start first) and the sentinel.
    pub data_ports: [u16; 2],
    pub sentinel_port: u16,
    processes: Processes,
}

/// The master name [`OwnSentinel`] watches.
pub const SENTINEL_MASTER: &str = "tessera";

impl OwnSentinel {
    pub fn start() -> Self {
        let ports = free_ports();
        let mut own =
            Self { data_ports: [ports[0], ports[1]], sentinel_port: ports[2], processes: Processes::new("sentinel") };
        let [primary, replica] = own.data_ports;
        own.processes.spawn(primary, &[]);
        own.processes.spawn(replica, &["--replicaof", "127.0.0.1", &primary.to_string()]);
        own.wait_for(replica, "to replicate", |c| {
            redis::cmd("INFO").arg("replication").query::<String>(c).is_ok_and(|i| i.contains("master_link_status:up"))
        });
        let config = own.processes.dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel.log\n\
                 sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                 sentinel failover-timeout {SENTINEL_MASTER} 10000\n\
                 sentinel parallel-syncs {SENTINEL_MASTER} 1\n",
                port = own.sentinel_port,
                dir = own.processes.dir.display()
            ),
        )
        .expect("the sentinel's configuration");
        let sentinel = own.sentinel_port;
        own.processes
            .spawn_command(sentinel, std::process::Command::new("redis-server").arg(&config).arg("--sentinel"));
        own.wait_for(sentinel, "to know the replica", |c| {
            redis::cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(SENTINEL_MASTER)
                .query::<Vec<std::collections::HashMap<String, String>>>(c)
                .is_ok_and(|r| r.iter().any(|r| r.get("flags").is_some_and(|f| f == "slave")))
        });
        own
    }

    /// The sentinel's URL.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    /// A plain connection to the server on `port`.
    pub fn node(&self, port: u16) -> redis::Connection {
        node(port)
    }

    /// The primary's port as the sentinel names it now.
    pub fn primary_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SENTINEL_MASTER)
            .query(&mut self.node(self.sentinel_port))
            .expect("the sentinel names the primary");
        port
    }

    /// Kills the server on `port` (SIGKILL: nothing is written or handed over).
    pub fn kill(&mut self, port: u16) {
        self.processes.kill(port);
    }

    fn wait_for(&mut self, port: u16, what: &str, ready: impl Fn(&mut redis::Connection) -> bool) {
        self.processes.wait_for(port, what, std::time::Duration::from_secs(30), ready);
    }
}
