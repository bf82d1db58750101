//! `redis.sentinel`: where Redis Sentinel is and the master it watches.

use secrecy::SecretString;
use serde::Deserialize;

use super::check_url;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSentinel {
    master: Option<String>,
    nodes: Option<Vec<String>>,
}

/// Where Redis Sentinel is, and the name of the master it watches.
#[derive(Debug, Clone)]
pub struct SentinelSettings {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// The sentinels (`redis://host:port`; at least one, at most 16). URLs, may hold the
    /// sentinels' password: kept secret. The primary they name is reached with the user,
    /// password and database of `redis_url` (its address is not used).
    pub nodes: Vec<SecretString>,
}

/// `redis.sentinel` from the environment, else the file: both fields or neither.
pub(super) fn sentinel_settings(
    file: Option<FileSentinel>,
    env: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<SentinelSettings>> {
    const MASTER: &str = "redis.sentinel.master (TESSERA_REDIS_SENTINEL_MASTER)";
    const NODES: &str = "redis.sentinel.nodes (TESSERA_REDIS_SENTINELS)";
    let file = file.unwrap_or_default();
    let master = env("TESSERA_REDIS_SENTINEL_MASTER").filter(|v| !v.trim().is_empty()).or(file.master);
    let nodes: Vec<String> = match env("TESSERA_REDIS_SENTINELS").filter(|v| !v.trim().is_empty()) {
        Some(raw) => raw.split(',').map(|n| n.trim().to_owned()).collect(),
        None => file.nodes.unwrap_or_default(),
    };
    let master = match (master, nodes.is_empty()) {
        (None, true) => return Ok(None),
        (None, false) => anyhow::bail!("{MASTER}: required with {NODES}"),
        (Some(_), true) => anyhow::bail!("{NODES}: required with {MASTER} (at least one sentinel)"),
        (Some(master), false) => master,
    };
    anyhow::ensure!(
        (1..=128).contains(&master.len())
            && master.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
        "{MASTER}: must be 1 to 128 letters, digits, '.', '_' or '-', got {master:?}"
    );
    anyhow::ensure!(nodes.len() <= 16, "{NODES}: at most 16 sentinels, got {}", nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        check_url(&format!("{NODES}[{i}]"), node, &["redis"])?;
    }
    Ok(Some(SentinelSettings { master, nodes: nodes.into_iter().map(SecretString::from).collect() }))
}
