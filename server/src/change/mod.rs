//! One transaction per change (DESIGN §5): the new snapshot version, its audit row and its
//! outbox row are written together, or nothing is.

pub mod store;

use crate::audit::store::Source;

/// Why a change was not written.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The entity is at another version than the change expected (someone else changed it).
    #[error("{entity} is at version {current}, not {expected}")]
    Conflict { entity: String, expected: i64, current: i64 },
    /// The body is not a valid snapshot of the entity's kind (or the kind is unknown).
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    /// The input does not parse (400), naming the field.
    #[error("{field}: {rule}")]
    Malformed { field: String, rule: String },
    /// Something with that identity exists already (and identities are never reused).
    #[error("{field}: {rule}")]
    Duplicate { field: String, rule: String },
    /// The change is not allowed as a direct write (an approval policy applies), naming
    /// what stands in the way (409).
    #[error("{field}: {rule}")]
    Blocked { field: String, rule: String },
    /// The entity the change is about does not exist.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

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
        Entity::Route(_) => crate::routing::snapshot_of(1, &versioned).map(|_| ()),
    }
}

/// Who makes a change, from where, and why: shared by every row the change writes.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub actor: &'a str,
    pub source: Source,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
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
