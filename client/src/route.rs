//! Routes in the data plane: a route's rules (`engine::route`) choose the pool a request
//! draws from, by the request's attributes. The control plane publishes each route's
//! snapshot to its meta hash in Redis ([`RouteAdmin::publish`], version-guarded); this
//! client keeps each route it serves compiled in memory, once per published version, and
//! asks Redis for the route's version at most once per [`CHECK_EVERY`] (a change reaches
//! every instance within that time), so deciding costs no round trip and no Postgres.
//! While Redis is unreachable, or lost the route, the route last seen keeps deciding (also
//! the one the control plane read from Postgres at start, [`Routes::remember`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::route::{Attributes, Loose, Route, RouteError};
use serde::{Deserialize, Serialize};

use crate::connection::{is_unreachable, RedisHandle};
use crate::keys::Keys;
use crate::pool::{Draw, PoolError, PoolName, Pools};
use crate::quota::InvalidInput;
use crate::scripts;

/// How long a compiled route is used before its version is asked again.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A route's name: 1..=64 of `[A-Za-z0-9_-]` (it becomes a Redis hash tag, so no braces).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(pattern = "^[A-Za-z0-9_-]{1,64}$"))]
#[serde(transparent)]
pub struct RouteName(String);

impl RouteName {
    /// Parses a route name, naming the rule it breaks.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > 64 {
            return Err(InvalidInput::new("route", format!("must be 1..=64 characters, got {}", raw.len())));
        }
        if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
            return Err(InvalidInput::new(
                "route",
                format!("may hold only ASCII letters, digits, '_' and '-'; found {bad:?}"),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The name as written in keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RouteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RouteName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A route as published: its version and its rules, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSnapshot {
    /// Snapshot version (≥ 1); an older one never replaces a newer one.
    pub version: u64,
    pub route: Route,
}

impl RouteSnapshot {
    /// Parses a stored body (the route's JSON form) with `version` beside it, as the meta
    /// hash and the snapshot table hold it.
    pub fn parse(version: u64, body: &Loose) -> Result<Self, RouteError> {
        if version == 0 {
            return Err(RouteError { field: "version".into(), rule: "must be at least 1".into() });
        }
        let mut body = body.clone();
        if let Loose::Map(m) = &mut body {
            m.remove("version");
        }
        Ok(Self { version, route: Route::parse(&body)? })
    }

    /// The JSON text the meta hash holds: the canonical route with its version.
    pub fn to_json(&self) -> String {
        let mut loose = self.route.to_loose();
        if let Loose::Map(m) = &mut loose {
            m.insert("version".into(), Loose::Number(self.version.to_string()));
        }
        serde_json::to_string(&loose).expect("a route serialises")
    }

    fn from_json(text: &str) -> Result<Self, RouteFailure> {
        let protocol = |detail: String| RouteFailure::Protocol { detail };
        let loose: Loose = serde_json::from_str(text).map_err(|e| protocol(e.to_string()))?;
        let version = match &loose {
            Loose::Map(m) => m.get("version").and_then(Loose::scalar_text).and_then(|v| v.parse().ok()),
            _ => None,
        }
        .ok_or_else(|| protocol("the route's snapshot has no version".into()))?;
        Self::parse(version, &loose).map_err(|e| protocol(e.to_string()))
    }
}

/// Why a route could not decide or draw.
#[derive(Debug, thiserror::Error)]
pub enum RouteFailure {
    /// No snapshot of this route has been published (and none is known here).
    #[error("unknown route {0:?}")]
    UnknownRoute(RouteName),
    /// The request's attributes break a rule (naming `attributes.<name>`).
    #[error("{0}")]
    Invalid(RouteError),
    /// Redis is unreachable and this client has never seen the route.
    #[error("route {route:?}: redis unreachable and no snapshot of the route here: {source}")]
    Unavailable { route: RouteName, source: redis::RedisError },
    /// The chosen pool could not be drawn from.
    #[error("route {route:?} chose pool {pool:?}: {source}")]
    Pool { route: RouteName, pool: String, source: Box<PoolError> },
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    #[error("unexpected route snapshot in redis: {detail}")]
    Protocol { detail: String },
}

/// What a route decided for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteDecision {
    pub route: RouteName,
    /// The route's snapshot version that decided.
    pub route_version: u64,
    /// The rule that matched (`None`: no rule did, the default pool serves).
    pub rule: Option<String>,
    /// Its position in the route's rules, from 0.
    pub rule_index: Option<usize>,
    pub pool: String,
}

/// A draw through a route: the decision and the draw from the chosen pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteDraw {
    pub decision: RouteDecision,
    pub draw: Draw,
}

struct Cached {
    snapshot: Arc<RouteSnapshot>,
    /// When the version was last asked of Redis (ms since the client's start; 0: never).
    checked: AtomicU64,
}

struct Inner {
    redis: RedisHandle,
    keys: Keys,
    started: Instant,
    cache: Mutex<HashMap<RouteName, Arc<Cached>>>,
}

/// The route client: cheap to clone, shared by every task of a process.
#[derive(Clone)]
pub struct Routes {
    inner: Arc<Inner>,
}

impl Routes {
    /// A client over `redis` under `keys`.
    pub fn new(redis: RedisHandle, keys: Keys) -> Self {
        Self { inner: Arc::new(Inner { redis, keys, started: Instant::now(), cache: Mutex::new(HashMap::new()) }) }
    }

    fn now_ms(&self) -> u64 {
        self.inner.started.elapsed().as_millis() as u64 + 1
    }

    /// Remembers a route's snapshot (the last one published, read from Postgres at start)
    /// unless a newer one is known, so routes decide before any Redis call succeeds. The
    /// next decision asks Redis for the version.
    pub fn remember(&self, name: &RouteName, snapshot: RouteSnapshot) {
        let mut cache = self.inner.cache.lock().expect("route cache lock");
        if cache.get(name).is_none_or(|c| c.snapshot.version < snapshot.version) {
            cache.insert(name.clone(), Arc::new(Cached { snapshot: Arc::new(snapshot), checked: AtomicU64::new(0) }));
        }
    }

    /// Makes the next decision of `name` ask Redis for its version (after this process
    /// published a change of it).
    pub fn recheck(&self, name: &RouteName) {
        if let Some(c) = self.inner.cache.lock().expect("route cache lock").get(name) {
            c.checked.store(0, Ordering::Relaxed);
        }
    }

    /// The route's snapshot to decide with: the one held when it was checked less than
    /// [`CHECK_EVERY`] ago, else the one Redis holds (re-read when its version moved).
    pub async fn snapshot(&self, name: &RouteName) -> Result<Arc<RouteSnapshot>, RouteFailure> {
        let cached = self.inner.cache.lock().expect("route cache lock").get(name).cloned();
        let now = self.now_ms();
        if let Some(c) = &cached {
            let checked = c.checked.load(Ordering::Relaxed);
            let fresh = checked != 0 && now.saturating_sub(checked) < CHECK_EVERY.as_millis() as u64;
            // One request checks; the others decide with what is held meanwhile.
            if fresh || c.checked.compare_exchange(checked, now, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                return Ok(c.snapshot.clone());
            }
        }
        let held = cached.as_ref().map(|c| c.snapshot.version);
        match self.read(name, held).await {
            Ok(Some(snapshot)) => {
                let snapshot = Arc::new(snapshot);
                let mut cache = self.inner.cache.lock().expect("route cache lock");
                let keep = cache.get(name).is_some_and(|c| c.snapshot.version > snapshot.version);
                if !keep {
                    cache.insert(
                        name.clone(),
                        Arc::new(Cached { snapshot: snapshot.clone(), checked: AtomicU64::new(now) }),
                    );
                }
                Ok(snapshot)
            }
            // The version Redis holds is the one held here.
            Ok(None) if cached.is_some() => Ok(cached.expect("checked").snapshot.clone()),
            Ok(None) => Err(RouteFailure::UnknownRoute(name.clone())),
            Err(RouteFailure::UnknownRoute(_)) if cached.is_some() => {
                tracing::warn!(route = %name, "redis does not hold this route: deciding with the one held here until it is republished");
                Ok(cached.expect("checked").snapshot.clone())
            }
            Err(RouteFailure::Redis(e)) if is_unreachable(&e) => match cached {
                Some(c) => Ok(c.snapshot.clone()),
                None => Err(RouteFailure::Unavailable { route: name.clone(), source: e }),
            },
            Err(other) => Err(other),
        }
    }

    /// The snapshot Redis holds when its version differs from `held` (`Ok(None)` when it
    /// is the same); `UnknownRoute` when Redis holds none.
    async fn read(&self, name: &RouteName, held: Option<u64>) -> Result<Option<RouteSnapshot>, RouteFailure> {
        let mut conn = self.inner.redis.connection().await.map_err(RouteFailure::Redis)?;
        let meta = self.inner.keys.route_meta(name.as_str());
        let version: Option<u64> =
            redis::cmd("HGET").arg(&meta).arg("version").query_async(&mut conn).await.map_err(RouteFailure::Redis)?;
        match version {
            None => Err(RouteFailure::UnknownRoute(name.clone())),
            Some(v) if Some(v) == held => Ok(None),
            Some(_) => {
                let text: Option<String> = redis::cmd("HGET")
                    .arg(&meta)
                    .arg("snapshot")
                    .query_async(&mut conn)
                    .await
                    .map_err(RouteFailure::Redis)?;
                let text = text.ok_or_else(|| RouteFailure::UnknownRoute(name.clone()))?;
                RouteSnapshot::from_json(&text).map(Some)
            }
        }
    }

    /// Decides which pool serves a request with `attributes` (already parsed).
    pub async fn decide(&self, name: &RouteName, attributes: &Attributes) -> Result<RouteDecision, RouteFailure> {
        let snapshot = self.snapshot(name).await?;
        let decision = snapshot.route.decide(attributes);
        Ok(RouteDecision {
            route: name.clone(),
            route_version: snapshot.version,
            rule: decision.rule.map(|(_, n)| n.to_owned()),
            rule_index: decision.rule.map(|(i, _)| i),
            pool: decision.pool.to_owned(),
        })
    }

    /// Decides the pool, then draws from it (by `sticky_key` when given): one Redis round
    /// trip for the draw, none for the decision while the route's version is fresh.
    pub async fn draw(
        &self,
        pools: &Pools,
        name: &RouteName,
        attributes: &Attributes,
        sticky_key: Option<&[u8]>,
    ) -> Result<RouteDraw, RouteFailure> {
        let decision = self.decide(name, attributes).await?;
        let pool = PoolName::parse(&decision.pool).map_err(|e| RouteFailure::Protocol { detail: e.to_string() })?;
        let drawn = match sticky_key {
            Some(key) => pools.draw_sticky(&pool, key).await,
            None => pools.draw(&pool).await,
        };
        match drawn {
            Ok(draw) => Ok(RouteDraw { decision, draw }),
            Err(source) => {
                Err(RouteFailure::Pool { route: name.clone(), pool: decision.pool, source: Box::new(source) })
            }
        }
    }
}

/// The control plane's side of routes: publish a snapshot (version-guarded).
#[derive(Clone)]
pub struct RouteAdmin {
    redis: RedisHandle,
    keys: Keys,
}

impl RouteAdmin {
    /// Operations over `redis` under `keys`.
    pub fn new(redis: RedisHandle, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// Installs a route's snapshot unless Redis holds one as new or newer: one script, so
    /// the version and the rules change together. Returns whether it was written.
    #[tracing::instrument(skip_all, fields(route = %name, version = snapshot.version), err)]
    pub async fn publish(&self, name: &RouteName, snapshot: &RouteSnapshot) -> Result<bool, RouteFailure> {
        let mut conn = self.redis.connection().await.map_err(RouteFailure::Redis)?;
        let (written, _current): (i64, u64) = scripts::route()
            .publish
            .key(self.keys.route_meta(name.as_str()))
            .arg(snapshot.version)
            .arg(snapshot.to_json())
            .invoke_async(&mut conn)
            .await
            .map_err(RouteFailure::Redis)?;
        Ok(written == 1)
    }

    /// The version of the route Redis holds, if any.
    pub async fn version(&self, name: &RouteName) -> Result<Option<u64>, RouteFailure> {
        let mut conn = self.redis.connection().await.map_err(RouteFailure::Redis)?;
        redis::cmd("HGET")
            .arg(self.keys.route_meta(name.as_str()))
            .arg("version")
            .query_async(&mut conn)
            .await
            .map_err(RouteFailure::Redis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_from_the_text_the_meta_hash_holds() {
        let body: Loose = serde_json::from_value(serde_json::json!({
            "rules": [{"name": "big", "when": {"amount": {"gte": 1000}}, "pool": "p-big"}],
            "default_pool": "p-all"
        }))
        .unwrap();
        let snapshot = RouteSnapshot::parse(3, &body).unwrap();
        let again = RouteSnapshot::from_json(&snapshot.to_json()).unwrap();
        assert_eq!(again, snapshot);
        assert!(RouteSnapshot::parse(0, &body).is_err());
        assert_eq!(RouteName::parse("a{b").unwrap_err().field, "route");
    }
}
