//! One transaction per change (design.md §5): the new snapshot version, its audit row and its
//! outbox row are written together, or nothing is.

pub mod store;

use crate::audit::store::Source;
use crate::error::ChangeError;

/// What a published snapshot is of, as the `snapshot` and `outbox` tables key it
/// (`pool:<name>`, `tenant:<name>`, `route:<name>`): the one place those prefixes are
/// written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entity {
    Pool(client::pool::PoolName),
    Tenant(client::quota::TenantId),
    Route(client::route::RouteName),
}

impl Entity {
    pub const POOL: &'static str = "pool:";
    pub const TENANT: &'static str = "tenant:";
    pub const ROUTE: &'static str = "route:";

    /// Parses a stored key, naming the rule a bad one breaks.
    pub fn parse(key: &str) -> Result<Self, ChangeError> {
        let invalid = |field: &str, rule: String| ChangeError::Invalid { field: field.to_owned(), rule };
        if let Some(name) = key.strip_prefix(Self::POOL) {
            Ok(Self::Pool(client::pool::PoolName::parse(name).map_err(|e| invalid("pool", e.rule))?))
        } else if let Some(name) = key.strip_prefix(Self::TENANT) {
            Ok(Self::Tenant(client::quota::TenantId::parse(name).map_err(|e| invalid("tenant", e.rule))?))
        } else if let Some(name) = key.strip_prefix(Self::ROUTE) {
            Ok(Self::Route(client::route::RouteName::parse(name).map_err(|e| invalid("route", e.rule))?))
        } else {
            Err(invalid("entity", format!("{key:?} is not a pool:<name>, tenant:<name> or route:<name>")))
        }
    }

    /// The key of a pool by its name as stored (already validated by the pool's table).
    pub fn pool_key(name: impl std::fmt::Display) -> String {
        format!("{}{name}", Self::POOL)
    }

    /// The key of a tenant by its name as stored.
    pub fn tenant_key(name: impl std::fmt::Display) -> String {
        format!("{}{name}", Self::TENANT)
    }

    /// The key of a route by its name as stored.
    pub fn route_key(name: impl std::fmt::Display) -> String {
        format!("{}{name}", Self::ROUTE)
    }
}

impl std::fmt::Display for Entity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pool(name) => write!(f, "{}{name}", Self::POOL),
            Self::Tenant(name) => write!(f, "{}{name}", Self::TENANT),
            Self::Route(name) => write!(f, "{}{name}", Self::ROUTE),
        }
    }
}

/// Checks that `body` is a publishable snapshot of the entity's kind, so that nothing the
/// publisher cannot deliver ever reaches the outbox.
pub fn validate_body(entity: &str, body: &serde_json::Value) -> Result<(), ChangeError> {
    let invalid = |field: &str, rule: String| ChangeError::Invalid { field: field.to_owned(), rule };
    let mut versioned = body.clone();
    versioned
        .as_object_mut()
        .ok_or_else(|| invalid("body", "must be a JSON object".to_owned()))?
        .insert("version".to_owned(), serde_json::json!(1));
    match Entity::parse(entity)? {
        Entity::Pool(_) => {
            let snapshot: client::pool::PoolSnapshot =
                serde_json::from_value(versioned).map_err(|e| invalid("body", e.to_string()))?;
            snapshot.validate().map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
        }
        Entity::Tenant(_) => {
            let quota: client::quota::TenantQuota =
                serde_json::from_value(versioned).map_err(|e| invalid("body", e.to_string()))?;
            quota.validate().map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
        }
        Entity::Route(_) => route_snapshot(1, &versioned).map(|_| ()),
    }
}

/// A route's body as it is stored and published: `{"rules", "default_pool"}` (canonical),
/// parsed into what the data plane decides with, with its version.
pub fn route_snapshot(version: i64, body: &serde_json::Value) -> Result<client::route::RouteSnapshot, ChangeError> {
    let loose: engine::route::Loose = serde_json::from_value(body.clone())
        .map_err(|e| ChangeError::Invalid { field: "route".into(), rule: e.to_string() })?;
    client::route::RouteSnapshot::parse(u64::try_from(version).unwrap_or(0), &loose)
        .map_err(|e| ChangeError::Invalid { field: e.field, rule: e.rule })
}

/// Who makes a change, from where, and why: shared by every row the change writes.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub actor: &'a str,
    pub source: Source,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
}

/// Who made the change and why, for every row it writes.
pub struct Actor {
    pub actor: String,
    pub source: Source,
    pub reason: Option<String>,
    pub request_id: Option<String>,
}

impl Actor {
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx {
            actor: &self.actor,
            source: self.source,
            reason: self.reason.as_deref(),
            request_id: self.request_id.as_deref(),
        }
    }
}

/// One entity a change wrote: its new version, its audit row and, when it is published,
/// its outbox row. Defined in `api`: it is part of every write's reply.
pub use api::Written;

pub(crate) fn check_version(entity: &str, expected: Option<i64>, current: i64) -> Result<(), ChangeError> {
    match expected {
        Some(expected) if expected != current => {
            Err(ChangeError::Conflict { entity: entity.to_owned(), expected, current })
        }
        _ => Ok(()),
    }
}
