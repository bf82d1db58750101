//! Probes: liveness, readiness (the check shared by `/readyz` and the dashboard) and the
//! Prometheus scrape endpoint ([`routes`]).

pub mod routes;

use std::time::Duration;

use api::{DependencyStatus, SystemStatus};

use crate::state::AppState;

/// How long one dependency may take to answer before it counts as down.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Checks Postgres and Redis concurrently, each bounded by [`CHECK_TIMEOUT`], and records
/// the outcome in the `tessera_dependency_up` gauge. This is all `/readyz` needs; probes
/// call it often, so it reads nothing else.
#[tracing::instrument(skip_all)]
pub async fn check_dependencies(state: &AppState) -> (DependencyStatus, DependencyStatus) {
    let (postgres, redis) = tokio::join!(check_postgres(state), check_redis(state));
    for (name, dep) in [("postgres", &postgres), ("redis", &redis)] {
        state.metrics.dependency_up.with_label_values(&[name]).set(i64::from(dep.up));
    }
    (postgres, redis)
}

/// The dependencies plus the newest snapshot, as the dashboard shows them.
#[tracing::instrument(skip_all)]
pub async fn check(state: &AppState) -> SystemStatus {
    let (postgres, redis) = check_dependencies(state).await;
    let (snapshot_version, snapshot_count) = if postgres.up {
        match crate::change::store::get_latest_version(&state.db).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "reading the latest snapshot version");
                (None, 0)
            }
        }
    } else {
        (None, 0)
    };
    SystemStatus {
        postgres,
        redis,
        snapshot_version,
        snapshot_count,
        redis_prefix: state.keys.prefix().to_string(),
        checked_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }
}

async fn check_postgres(state: &AppState) -> DependencyStatus {
    let outcome = tokio::time::timeout(CHECK_TIMEOUT, crate::store::get_server_version(&state.db)).await;
    match outcome {
        Ok(Ok(version)) => up(version),
        Ok(Err(e)) => down(format!("postgres: {e}")),
        Err(_) => down(format!("postgres: no answer within {} s", CHECK_TIMEOUT.as_secs())),
    }
}

async fn check_redis(state: &AppState) -> DependencyStatus {
    let probe = async {
        let mut conn = state.redis.connection().await?;
        // One node's INFO (on a cluster any primary's); a cluster that cannot serve every
        // slot is down for the data plane.
        let info: String = redis::from_owned_redis_value(conn.on_node(None, redis::cmd("INFO").arg("server")).await?)?;
        if conn.is_cluster() {
            let cluster: String =
                redis::from_owned_redis_value(conn.on_node(None, redis::cmd("CLUSTER").arg("INFO")).await?)?;
            if !cluster.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Err(redis::RedisError::from((redis::ErrorKind::ClusterDown, "cluster_state is not ok")));
            }
            return Ok(format!("{} (cluster)", redis_version(&info)));
        }
        Ok::<_, redis::RedisError>(redis_version(&info))
    };
    match tokio::time::timeout(CHECK_TIMEOUT, probe).await {
        Ok(Ok(version)) => up(version),
        Ok(Err(e)) => down(format!("redis: {e}")),
        Err(_) => down(format!("redis: no answer within {} s", CHECK_TIMEOUT.as_secs())),
    }
}

fn redis_version(info: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn up(version: String) -> DependencyStatus {
    DependencyStatus { up: true, version: Some(version), error: None }
}

fn down(error: String) -> DependencyStatus {
    DependencyStatus { up: false, version: None, error: Some(error) }
}
