//! One connection type for both deployments: a single Redis server, or a Redis Cluster
//! reached through its seed nodes. Scripts and commands of one pool or one tenant go to the
//! node holding that hash tag's slot (MOVED and ASK are followed by the cluster connection,
//! TRYAGAIN during a slot move is retried); the few operations that touch many entities
//! ([`RedisConnection::send_each`], [`RedisConnection::keys_matching`]) say how they spread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, RedisFuture, RedisResult, Value};

/// How many requests [`RedisConnection::send_each`] keeps in flight on a cluster.
pub const SEND_EACH_IN_FLIGHT: usize = 64;

/// A connection to the data plane's Redis: a reconnecting connection to one server, or a
/// cluster connection that follows the slot map. Clones share the connection.
#[derive(Clone)]
pub enum RedisConnection {
    /// One server (given by its URL, or the primary Sentinel names), through a
    /// [`ConnectionManager`] that notes when the server can no longer serve as the primary.
    Single(Watched),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// One server's connection, which notes a reply that says the server cannot serve as the
/// primary any more: `READONLY` (the old primary, a replica after a failover),
/// `MASTERDOWN`, `LOADING`; through Sentinel, also any failure to reach it or `NOREPLICAS`
/// (the primary may have moved). The handle then drops it and connects again, through Sentinel to the
/// primary it names now: a [`ConnectionManager`] alone would reconnect to the same address
/// for ever.
#[derive(Clone)]
pub struct Watched {
    manager: ConnectionManager,
    stale: Arc<AtomicBool>,
    /// Through Sentinel: a server that cannot be reached may have been replaced.
    follow: bool,
}

impl Watched {
    /// `manager`, watched; `follow`: the server was named by Sentinel.
    pub fn new(manager: ConnectionManager, follow: bool) -> Self {
        Self { manager, stale: Arc::new(AtomicBool::new(false)), follow }
    }

    /// True once a reply said the server cannot serve as the primary now.
    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    /// Marks the connection to be made again (the sentinels name another primary).
    pub fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    fn note(stale: &AtomicBool, follow: bool, error: &redis::RedisError) {
        if must_reconnect(error, follow) && !stale.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %error, "this redis server cannot serve as the primary now: connecting again");
        }
    }
}

/// Whether `error` says the server behind a connection cannot serve writes any more, so the
/// connection must be made again (through Sentinel, `follow`: also a failure to reach it).
pub fn must_reconnect(error: &redis::RedisError, follow: bool) -> bool {
    use crate::connection::{connection_failed, no_replicas};
    use redis::ErrorKind::{BusyLoadingError, MasterDown, ReadOnly};
    matches!(error.kind(), ReadOnly | MasterDown | BusyLoadingError)
        || (follow && (no_replicas(error) || connection_failed(error)))
}

impl ConnectionLike for Watched {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.manager.req_packed_command(cmd).await;
            if let Err(e) = &result {
                Self::note(&self.stale, self.follow, e);
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let result = self.manager.req_packed_commands(cmd, offset, count).await;
            match &result {
                Err(e) => Self::note(&self.stale, self.follow, e),
                Ok(replies) => {
                    for reply in replies {
                        if let Value::ServerError(e) = reply {
                            Self::note(&self.stale, self.follow, &redis::RedisError::from(e.clone()));
                        }
                    }
                }
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// A primary of a cluster (or the one server): host and port as the cluster announces them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl RedisConnection {
    /// True when the connection must be made again (see [`Watched`]); a cluster connection
    /// follows failovers by itself (MOVED, and the slot map it reads again).
    pub fn is_stale(&self) -> bool {
        match self {
            Self::Single(c) => c.is_stale(),
            Self::Cluster(_) => false,
        }
    }

    /// True on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// Sends each command on its own and answers one result per command, in order (a
    /// server error in one reply is that command's `Err`). On one server the commands go
    /// as one pipeline (`Err` as a whole when the connection failed); on a cluster, whose
    /// commands' keys may live on different nodes, as concurrent requests over the shared
    /// connection, each with its own result (a node away fails only its commands).
    pub async fn send_each(&mut self, commands: Vec<Cmd>) -> RedisResult<Vec<RedisResult<Value>>> {
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Self::Single(conn) => {
                let mut pipe = redis::pipe();
                for command in commands {
                    pipe.add_command(command);
                }
                let count = pipe.cmd_iter().count();
                let replies = conn.req_packed_commands(&pipe, 0, count).await?;
                Ok(replies
                    .into_iter()
                    .map(|reply| match reply {
                        Value::ServerError(e) => Err(redis::RedisError::from(e)),
                        other => Ok(other),
                    })
                    .collect())
            }
            Self::Cluster(conn) => {
                use futures::StreamExt;
                let sends = commands.into_iter().map(|command| {
                    let mut conn = conn.clone();
                    async move { conn.req_packed_command(&command).await }
                });
                // Each reply stands alone: with one node away, the commands other nodes ran
                // are answered as done (the caller must not count them as lost). At most
                // SEND_EACH_IN_FLIGHT at once, in order, so thousands of entities do not
                // queue thousands of requests behind one response timeout.
                Ok(futures::stream::iter(sends).buffered(SEND_EACH_IN_FLIGHT).collect().await)
            }
        }
    }

    /// The primaries that hold the keyspace: the one server (as `None`: this connection's
    /// own), or each primary of the cluster from `CLUSTER SLOTS`.
    pub async fn primaries(&mut self) -> RedisResult<Vec<Option<Node>>> {
        match self {
            Self::Single(_) => Ok(vec![None]),
            Self::Cluster(conn) => {
                let slots = conn
                    .route_command(
                        &redis::cmd("CLUSTER").arg("SLOTS").to_owned(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
                    )
                    .await?;
                let mut nodes = primaries_of(slots)?;
                nodes.sort();
                nodes.dedup();
                Ok(nodes.into_iter().map(Some).collect())
            }
        }
    }

    /// Sends `command` to one primary (`None`: the one server, or any primary).
    pub async fn on_node(&mut self, node: Option<&Node>, command: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(command).await,
            Self::Cluster(conn) => {
                let route = match node {
                    Some(node) => SingleNodeRoutingInfo::ByAddress { host: node.host.clone(), port: node.port },
                    None => SingleNodeRoutingInfo::RandomPrimary,
                };
                conn.route_command(command, RoutingInfo::SingleNode(route)).await
            }
        }
    }

    /// Every key matching `pattern` on every primary (`SCAN MATCH` node by node: on a
    /// cluster one node's `SCAN` sees only its own slots). For tools and tests; the jobs
    /// iterate entities known from Postgres instead.
    pub async fn keys_matching(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        let mut found = Vec::new();
        for node in self.primaries().await? {
            let mut cursor: u64 = 0;
            loop {
                let command =
                    redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000).to_owned();
                let reply = self.on_node(node.as_ref(), &command).await?;
                let (next, batch): (u64, Vec<String>) = redis::from_owned_redis_value(reply)?;
                found.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(found)
    }

    /// Removes every key matching `pattern` (see [`Self::keys_matching`]); answers how many
    /// were removed. Never `FLUSHALL`: the Redis may be shared. The keys of one hash tag
    /// (one pool's, one tenant's) go in one `MULTI`/`EXEC`, so nothing sees an entity half
    /// removed; keys without a tag go one by one.
    pub async fn unlink_matching(&mut self, pattern: &str) -> RedisResult<u64> {
        let keys = self.keys_matching(pattern).await?;
        let mut by_tag: std::collections::BTreeMap<Option<&str>, Vec<&str>> = Default::default();
        for key in &keys {
            by_tag.entry(hash_tag(key)).or_default().push(key);
        }
        let mut removed = 0;
        for (tag, group) in by_tag {
            if tag.is_none() {
                for key in group {
                    removed += redis::cmd("UNLINK").arg(key).query_async::<u64>(self).await?;
                }
                continue;
            }
            for chunk in group.chunks(500) {
                let (n,): (u64,) = redis::pipe().atomic().cmd("UNLINK").arg(chunk).query_async(self).await?;
                removed += n;
            }
        }
        Ok(removed)
    }
}

/// The hash tag of a key (what Redis Cluster hashes: between the first `{` and the next
/// `}`, when not empty), if any.
fn hash_tag(key: &str) -> Option<&str> {
    let (_, rest) = key.split_once('{')?;
    let (tag, _) = rest.split_once('}')?;
    (!tag.is_empty()).then_some(tag)
}

/// The primaries named in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …],
/// replica…], …]` (one per slot range: a primary with several ranges comes several times).
pub fn primaries_of(slots: Value) -> RedisResult<Vec<Node>> {
    let ranges: Vec<Vec<Value>> = redis::from_owned_redis_value(slots)?;
    let mut nodes = Vec::new();
    for range in ranges {
        let Some(primary) = range.into_iter().nth(2) else { continue };
        let fields: Vec<Value> = redis::from_owned_redis_value(primary)?;
        let mut fields = fields.into_iter();
        let (Some(host), Some(port)) = (fields.next(), fields.next()) else { continue };
        nodes.push(Node { host: redis::from_owned_redis_value(host)?, port: redis::from_owned_redis_value(port)? });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_keys_hash_tag_is_the_text_in_its_first_braces() {
        assert_eq!(hash_tag("t:pool:{cn-pay}:meta"), Some("cn-pay"));
        assert_eq!(hash_tag("t:quota:{acme}:done:{x}"), Some("acme"));
        assert_eq!(hash_tag("t:bench-raw"), None);
        assert_eq!(hash_tag("t:{}:x"), None);
    }

    #[test]
    fn the_primaries_are_read_from_cluster_slots() {
        let range = |start: i64, end: i64, port: i64| {
            Value::Array(vec![
                Value::Int(start),
                Value::Int(end),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk("id")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(port + 100), bulk("replica")]),
            ])
        };
        let reply = Value::Array(vec![range(0, 5460, 7000), range(5461, 10922, 7001), range(10923, 16383, 7002)]);

        let nodes = primaries_of(reply).unwrap();

        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        assert_eq!(ports, [7000, 7001, 7002]);
        assert_eq!(nodes[0].to_string(), "127.0.0.1:7000");
    }
}
