//! A Redis connection that reconnects by itself and never waits without bound.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
        Self {
            connect: Duration::from_millis(1000),
            response: Duration::from_millis(1000),
        }
    }
}

/// Opens a [`ConnectionManager`]: one multiplexed connection shared by all callers, which
/// reconnects in the background after Redis restarts. Fails when Redis does not answer:
/// two attempts of at most `timeouts.connect` each, with a short back-off between them.
pub async fn connect(
    client: &redis::Client,
    timeouts: RedisTimeouts,
) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(timeouts.connect)
        .set_response_timeout(timeouts.response)
        .set_number_of_retries(1)
        .set_max_delay(2000);
    ConnectionManager::new_with_config(client.clone(), config).await
}
