//! A Redis connection (one server or a cluster) that reconnects by itself and never waits
//! without bound.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use crate::nodes::{Node, RedisConnection};

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

    /// True for a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster { .. })
    }
}

/// A Redis connection opened on first use and shared by clones. A service can start (and
/// report Redis down, or fall back) while Redis is unreachable, and connects as soon as it
/// answers; once open, the connection reconnects by itself after restarts (and on a cluster
/// follows the slot map as slots move).
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
    /// any seed will do; `attempt` picks the next seed after a failed one.
    pub fn pubsub_client(&self, attempt: usize) -> &redis::Client {
        match &self.target {
            RedisTarget::Single(client) => client,
            RedisTarget::Cluster { seeds, .. } => &seeds[attempt % seeds.len()],
        }
    }

    /// The shared connection, opening it when there is none yet.
    pub async fn connection(&self) -> redis::RedisResult<RedisConnection> {
        if self.failed.is_open() {
            return Err(Breaker::skipped_error());
        }
        let mut guard = self.manager.lock().await;
        if let Some(manager) = guard.as_ref() {
            return Ok(manager.clone());
        }
        // Callers that queued behind a connect that just failed fail at once too, instead
        // of each trying (and waiting) in turn.
        if self.failed.is_open() {
            return Err(Breaker::skipped_error());
        }
        let connecting = {
            let (target, timeouts) = (self.target.clone(), self.timeouts);
            async move {
                let mut conn = match &target {
                    RedisTarget::Single(client) => RedisConnection::Single(connect(client, timeouts).await?),
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
                // Every script on every primary now, so the first calls find them there (a
                // NOSCRIPT later, after a flush or a new node, loads again on every node).
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

/// Whether an error means Redis could not serve the request (so a fallback applies, and
/// a later attempt may succeed), as opposed to Redis refusing the request itself. Besides
/// connection failures, that is a server that cannot serve for now: `READONLY` (a replica,
/// say the old primary after a failover), `MASTERDOWN` (a replica cut off from its
/// primary), `LOADING` (a restart reading its data back), `TRYAGAIN`, `CLUSTERDOWN`, and a
/// cluster client that found no connection to the node of a slot.
pub fn is_unreachable(error: &redis::RedisError) -> bool {
    use redis::ErrorKind::{BusyLoadingError, ClusterConnectionNotFound, ClusterDown, MasterDown, ReadOnly, TryAgain};
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            ReadOnly | MasterDown | BusyLoadingError | TryAgain | ClusterDown | ClusterConnectionNotFound
        )
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
    fn an_error_in_the_request_itself_does_not_count_as_unreachable() {
        for kind in [ErrorKind::ResponseError, ErrorKind::NoScriptError, ErrorKind::TypeError] {
            assert!(!is_unreachable(&reply(kind)), "{kind:?}");
        }
    }
}
