//! A Redis connection (one server or a cluster) that reconnects by itself and never waits
//! without bound.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use crate::nodes::{must_reconnect, Node, RedisConnection, Watched};

/// How long Redis operations may take before the caller gets an error (and may fall back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisTimeouts {
    /// One connection attempt.
    pub connect: Duration,
    /// One command or script, from send to reply.
    pub response: Duration,
}

impl Default for RedisTimeouts {
    fn default() -> Self {
        Self { connect: Duration::from_millis(1000), response: Duration::from_millis(1000) }
    }
}

/// Opens a [`ConnectionManager`]: one multiplexed connection shared by all callers, which
/// reconnects in the background after Redis restarts. Fails when Redis does not answer:
/// two attempts of at most `timeouts.connect` each, with a short back-off between them.
pub async fn connect(client: &redis::Client, timeouts: RedisTimeouts) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(timeouts.connect)
        .set_response_timeout(timeouts.response)
        .set_number_of_retries(1)
        .set_max_delay(2000);
    ConnectionManager::new_with_config(client.clone(), config).await
}

/// Where the data plane's Redis is.
#[derive(Clone)]
pub enum RedisTarget {
    /// One Redis server.
    Single(redis::Client),
    /// A Redis Cluster, reached through its seed nodes (any of them will do: the client
    /// learns the slot map from the first that answers).
    Cluster {
        client: redis::cluster::ClusterClient,
        /// One plain client per seed node, for the cluster-wide pub/sub channel.
        seeds: Vec<redis::Client>,
    },
    /// The primary that Redis Sentinel names for a master, asked again whenever the
    /// connection finds its server cannot serve as the primary, or the sentinels name
    /// another one (a failover).
    Sentinel(std::sync::Arc<SentinelTarget>),
}

/// The sentinels, the master they watch, and how to reach the data nodes.
pub struct SentinelTarget {
    sentinels: Vec<redis::Client>,
    master: String,
    /// The data nodes' user, password and database (the address is the primary's).
    data: redis::ConnectionInfo,
}

/// How often a connection through Sentinel asks whether the primary moved.
pub const SENTINEL_POLL: Duration = Duration::from_millis(500);

impl SentinelTarget {
    /// The primary's address as the first sentinel that answers names it (each asked within
    /// the timeouts, in turn: one that hangs costs its timeout, not the lookup).
    pub async fn primary(&self, timeouts: RedisTimeouts) -> redis::RedisResult<(String, u16)> {
        let mut why = Vec::new();
        for sentinel in &self.sentinels {
            let asked = async {
                let mut conn = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(timeouts.connect + timeouts.response, asked).await {
                Ok(Ok(Some(address))) => return Ok(address),
                Ok(Ok(None)) => {
                    why.push(format!("{}: no master {:?}", sentinel.get_connection_info().addr, self.master))
                }
                Ok(Err(e)) => why.push(format!("{}: {e}", sentinel.get_connection_info().addr)),
                Err(_) => why.push(format!("{}: no answer in time", sentinel.get_connection_info().addr)),
            }
        }
        // Unreachable for the callers: the fallbacks apply until a sentinel names one.
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("no sentinel named the primary of {:?}: {}", self.master, why.join("; ")),
        )))
    }

    /// A client for the data node at `address`.
    fn client_at(&self, (host, port): (String, u16)) -> redis::RedisResult<redis::Client> {
        let mut info = self.data.clone();
        info.addr = redis::ConnectionAddr::Tcp(host, port);
        redis::Client::open(info)
    }
}

impl RedisTarget {
    /// A cluster reached through `nodes` (`redis://host:port` each; at least one). The
    /// cluster connection retries a request moved between nodes (MOVED, ASK, TRYAGAIN
    /// during a slot move) for as long as `timeouts.response` allows.
    pub fn cluster(nodes: &[String], timeouts: RedisTimeouts) -> redis::RedisResult<Self> {
        if nodes.is_empty() {
            return Err(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no cluster seed nodes")));
        }
        let seeds = nodes.iter().map(|n| redis::Client::open(n.as_str())).collect::<Result<Vec<_>, _>>()?;
        let client = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            .retries(12)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .build()?;
        Ok(Self::Cluster { client, seeds })
    }

    /// The primary of `master` as the sentinels at `sentinels` (`redis://host:port` each; at
    /// least one) name it, reached with the user, password and database of `data` (a Redis
    /// URL whose address is not used).
    pub fn sentinel(sentinels: &[String], master: &str, data: &str) -> redis::RedisResult<Self> {
        if sentinels.is_empty() {
            return Err(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no sentinel nodes")));
        }
        let sentinels = sentinels.iter().map(|n| redis::Client::open(n.as_str())).collect::<Result<Vec<_>, _>>()?;
        let data = redis::IntoConnectionInfo::into_connection_info(data)?;
        Ok(Self::Sentinel(std::sync::Arc::new(SentinelTarget { sentinels, master: master.to_owned(), data })))
    }

    /// A client for the server that serves as the primary now: the one server, a seed of the
    /// cluster (`attempt` picks the next one after a failed one), or what Sentinel names.
    async fn primary_client(&self, attempt: usize, timeouts: RedisTimeouts) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Single(client) => Ok(client.clone()),
            Self::Cluster { seeds, .. } => Ok(seeds[attempt % seeds.len()].clone()),
            Self::Sentinel(target) => target.client_at(target.primary(timeouts).await?),
        }
    }

    /// True for a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster { .. })
    }
}

/// A Redis connection opened on first use and shared by clones. A service can start (and
/// report Redis down, or fall back) while Redis is unreachable, and connects as soon as it
/// answers; once open, the connection reconnects by itself after restarts (and on a cluster
/// follows the slot map as slots move). A server that answers `READONLY`, `MASTERDOWN` or
/// `LOADING` (through Sentinel, also one that cannot be reached) is dropped, and the next
/// call connects again: through Sentinel, to the primary it names after a failover.
#[derive(Clone)]
pub struct RedisHandle {
    target: RedisTarget,
    timeouts: RedisTimeouts,
    manager: std::sync::Arc<tokio::sync::Mutex<Option<RedisConnection>>>,
    /// Open for a moment after the first connect failed.
    failed: std::sync::Arc<Breaker>,
    /// The runtime the handle was made on: the connection's background tasks run there,
    /// not on whichever runtime first asked (an HTTP worker's runtime may stop first).
    runtime: Option<tokio::runtime::Handle>,
}

impl RedisHandle {
    /// A handle on one Redis server that has not connected yet.
    pub fn new(client: redis::Client, timeouts: RedisTimeouts) -> Self {
        Self::on(RedisTarget::Single(client), timeouts)
    }

    /// A handle on `target` that has not connected yet.
    pub fn on(target: RedisTarget, timeouts: RedisTimeouts) -> Self {
        Self {
            target,
            timeouts,
            manager: Default::default(),
            failed: Default::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Where this handle connects.
    pub fn target(&self) -> &RedisTarget {
        &self.target
    }

    /// A client for a pub/sub connection of its own. On a cluster, classic pub/sub is
    /// cluster-wide: a message published on any node reaches subscribers on every node, so
    /// any seed will do; `attempt` picks the next seed after a failed one. Through Sentinel,
    /// the primary it names now.
    pub async fn pubsub_client(&self, attempt: usize) -> redis::RedisResult<redis::Client> {
        self.target.primary_client(attempt, self.timeouts).await
    }

    /// The shared connection, opening it when there is none yet.
    pub async fn connection(&self) -> redis::RedisResult<RedisConnection> {
        if self.failed.is_open() {
            return Err(Breaker::skipped_error());
        }
        let mut guard = self.manager.lock().await;
        if let Some(manager) = guard.as_ref() {
            if !manager.is_stale() {
                return Ok(manager.clone());
            }
            // The server said it cannot serve as the primary (or, through Sentinel, could not
            // be reached): a new connection, to the primary named now.
            *guard = None;
        }
        // Callers that queued behind a connect that just failed fail at once too, instead
        // of each trying (and waiting) in turn.
        if self.failed.is_open() {
            return Err(Breaker::skipped_error());
        }
        let connecting = {
            let (target, timeouts, slot) =
                (self.target.clone(), self.timeouts, std::sync::Arc::downgrade(&self.manager));
            async move {
                let mut conn = match &target {
                    RedisTarget::Single(client) => {
                        RedisConnection::Single(Watched::new(connect(client, timeouts).await?, false))
                    }
                    RedisTarget::Sentinel(sentinel) => {
                        let address = sentinel.primary(timeouts).await?;
                        let mut manager = connect(&sentinel.client_at(address.clone())?, timeouts).await?;
                        // Named moments ago, it may be a replica by now (a failover under way).
                        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut manager).await?;
                        let primary = match role.first() {
                            Some(redis::Value::BulkString(r)) => r.as_slice() == b"master",
                            Some(redis::Value::SimpleString(r)) => r == "master",
                            _ => false,
                        };
                        if !primary {
                            return Err(redis::RedisError::from(std::io::Error::new(
                                std::io::ErrorKind::NotConnected,
                                format!("{}:{} is no primary (any more)", address.0, address.1),
                            )));
                        }
                        let watched = Watched::new(manager, true);
                        tokio::spawn(watch_primary(sentinel.clone(), address, watched.clone(), timeouts, slot));
                        RedisConnection::Single(watched)
                    }
                    RedisTarget::Cluster { client, .. } => {
                        let conn = tokio::time::timeout(timeouts.connect * 2, client.get_async_connection())
                            .await
                            .map_err(|_| {
                            redis::RedisError::from(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "no cluster seed node answered",
                            ))
                        })??;
                        RedisConnection::Cluster(conn)
                    }
                };
                // Every script and the quota library on every primary now, so the first calls
                // find them there (a NOSCRIPT or a missing function later, after a flush or
                // on a new node, loads again on every primary).
                crate::scripts::load_all(&mut conn).await;
                Ok::<_, redis::RedisError>(conn)
            }
        };
        let connected = match &self.runtime {
            Some(runtime) => runtime.spawn(connecting).await.unwrap_or_else(|e| {
                Err(redis::RedisError::from((redis::ErrorKind::IoError, "connect task failed", e.to_string())))
            }),
            None => connecting.await,
        };
        match connected {
            Ok(manager) => {
                *guard = Some(manager.clone());
                Ok(manager)
            }
            Err(e) => {
                self.failed.trip();
                Err(e)
            }
        }
    }
}

/// Asks the sentinels every [`SENTINEL_POLL`] which server is the primary; when they name
/// another than `address` (a failover, which leaves the old primary writable for a while),
/// marks `connection` stale so the next call connects to the new one. Ends then, or when
/// the connection is stale anyway, or its handle is gone.
async fn watch_primary(
    target: std::sync::Arc<SentinelTarget>,
    address: (String, u16),
    connection: Watched,
    timeouts: RedisTimeouts,
    handle: std::sync::Weak<tokio::sync::Mutex<Option<RedisConnection>>>,
) {
    loop {
        tokio::time::sleep(SENTINEL_POLL).await;
        if connection.is_stale() || handle.strong_count() == 0 {
            return;
        }
        if let Ok(now) = target.primary(timeouts).await {
            if now != address {
                tracing::warn!(from = %format!("{}:{}", address.0, address.1), to = %format!("{}:{}", now.0, now.1), "the sentinels name a new redis primary: connecting to it");
                connection.mark_stale();
                return;
            }
        }
    }
}

/// Whether an error means Redis could not serve the request (so a fallback applies, and
/// a later attempt may succeed), as opposed to Redis refusing the request itself. Besides
/// connection failures, that is a server that cannot serve for now: `READONLY` (a replica,
/// say the old primary after a failover), `MASTERDOWN` (a replica cut off from its
/// primary), `LOADING` (a restart reading its data back), `TRYAGAIN`, `CLUSTERDOWN`,
/// `NOREPLICAS` (a primary short of the replicas its `min-replicas-to-write` asks for), and
/// a cluster client that found no connection to the node of a slot.
pub fn is_unreachable(error: &redis::RedisError) -> bool {
    use redis::ErrorKind::{BusyLoadingError, ClusterConnectionNotFound, ClusterDown, MasterDown, ReadOnly, TryAgain};
    connection_failed(error)
        || no_replicas(error)
        || matches!(
            error.kind(),
            ReadOnly | MasterDown | BusyLoadingError | TryAgain | ClusterDown | ClusterConnectionNotFound
        )
}

/// The connection itself failed: refused, dropped, timed out or another I/O error.
pub(crate) fn connection_failed(error: &redis::RedisError) -> bool {
    error.is_io_error() || error.is_timeout() || error.is_connection_dropped() || error.is_connection_refusal()
}

/// A primary with fewer replicas than its `min-replicas-to-write`: it refuses writes until
/// they come back (or, cut off from them, while a failover replaces it).
pub(crate) fn no_replicas(error: &redis::RedisError) -> bool {
    error.code() == Some("NOREPLICAS")
}

/// How long callers skip Redis after finding it unreachable, before trying it again.
pub const RETRY_REDIS_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// Remembers that Redis was just found unreachable, so that the next calls fall back at
/// once instead of each waiting for a connection timeout; after [`RETRY_REDIS_AFTER`] one
/// call tries Redis again (and closes the breaker when it answers).
#[derive(Debug, Default)]
pub struct Breaker {
    /// Milliseconds since `base()` until which Redis is skipped; 0 when closed.
    open_until: std::sync::atomic::AtomicU64,
}

fn base() -> std::time::Instant {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

impl Breaker {
    fn now_ms() -> u64 {
        base().elapsed().as_millis() as u64 + 1
    }

    /// The error to report while the breaker is open: Redis is being skipped.
    pub fn skipped_error() -> redis::RedisError {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "redis was unreachable moments ago; skipped until the retry interval passes",
        ))
    }

    /// True while Redis should be skipped.
    pub fn is_open(&self) -> bool {
        Self::now_ms() < self.open_until.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Redis was found unreachable: skip it for [`RETRY_REDIS_AFTER`].
    pub fn trip(&self) {
        let until = Self::now_ms() + RETRY_REDIS_AFTER.as_millis() as u64;
        self.open_until.store(until, std::sync::atomic::Ordering::Relaxed);
    }

    /// Redis answered.
    pub fn reset(&self) {
        self.open_until.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, RedisError};

    fn reply(kind: ErrorKind) -> RedisError {
        RedisError::from((kind, "a reply of that kind"))
    }

    #[test]
    fn a_server_that_cannot_serve_now_counts_as_unreachable() {
        // READONLY (a replica after failover), MASTERDOWN (a replica cut from its primary),
        // LOADING (a restart reading its data back), TRYAGAIN (a slot moving).
        let kinds = [ErrorKind::ReadOnly, ErrorKind::MasterDown, ErrorKind::BusyLoadingError, ErrorKind::TryAgain];

        let unreachable: Vec<bool> = kinds.iter().map(|kind| is_unreachable(&reply(*kind))).collect();

        assert_eq!(unreachable, [true; 4], "{kinds:?}");
    }

    #[test]
    fn a_connection_that_fails_counts_as_unreachable() {
        let refused = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));

        assert!(is_unreachable(&refused));
        assert!(is_unreachable(&Breaker::skipped_error()));
    }

    #[test]
    fn a_server_that_cannot_serve_as_the_primary_is_connected_again_and_through_sentinel_one_away_too() {
        for kind in [ErrorKind::ReadOnly, ErrorKind::MasterDown, ErrorKind::BusyLoadingError] {
            assert!(must_reconnect(&reply(kind), false), "{kind:?}");
        }
        let refused = RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        // One URL: the connection reconnects to it by itself; through Sentinel, the primary
        // may have moved.
        assert!(!must_reconnect(&refused, false));
        assert!(must_reconnect(&refused, true));
        for kind in [ErrorKind::ResponseError, ErrorKind::NoScriptError, ErrorKind::TryAgain] {
            assert!(!must_reconnect(&reply(kind), true), "{kind:?}");
        }
    }

    #[test]
    fn an_error_in_the_request_itself_does_not_count_as_unreachable() {
        for kind in [ErrorKind::ResponseError, ErrorKind::NoScriptError, ErrorKind::TypeError] {
            assert!(!is_unreachable(&reply(kind)), "{kind:?}");
        }
    }
}
