//! The replies of the routes' endpoints (`/api/v1/routes…`): routing rules that choose the
//! pool a request draws from by its attributes.

use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// A route in the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteSummary {
    /// The route's name.
    pub name: String,
    /// Its version (every change of a route is published: the snapshot's version).
    pub version: i64,
    /// How many rules it holds.
    pub rules: i64,
    /// Where requests no rule matches go.
    pub default_pool: String,
    /// Every pool it can send a request to (each rule's and the default), by name.
    pub pools: Vec<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// `GET /api/v1/routes`: every route, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteList {
    pub routes: Vec<RouteSummary>,
}

/// `GET /api/v1/routes/{route}`: the route as configured, and what Redis holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteDetail {
    pub name: String,
    /// The route's version (the next change's `expected_version`).
    pub version: i64,
    /// `{"rules": [{"name", "when", "pool"}], "default_pool"}` in canonical form (every rule
    /// named, currency and country codes upper case, amounts as exact decimal strings):
    /// what `PUT` takes.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub route: serde_json::Value,
    /// Each rule in words (`amount ≥ 1000 and currency in USD, EUR`), in order.
    pub described: Vec<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// `POST /api/v1/routes/{route}/evaluate`: which rule and pool a request with these
/// attributes gets, without drawing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteDecision {
    pub route: String,
    /// The route's version that decided.
    pub route_version: u64,
    /// The rule that matched; null when none did (the default pool serves).
    pub rule: Option<String>,
    /// Its position among the route's rules, from 0; null when none matched.
    pub rule_index: Option<u32>,
    /// The pool the request draws from.
    pub pool: String,
}

/// `POST /api/v1/routes/{route}/draw`: the decision and the member drawn from its pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteDrawn {
    #[serde(flatten)]
    pub decision: RouteDecision,
    /// The member (channel) drawn from `pool`.
    pub member: String,
    /// The pool's snapshot version the ticket came from (0 for a static draw).
    pub version: u64,
    /// Which level served the draw: `redis`, `local` or `static`.
    pub source: String,
    /// For a `tiers` pool drawn in Redis: the tier that served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// One version of a route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteVersion {
    pub version: i64,
    /// When it was made (RFC 3339).
    pub at: String,
    pub actor: Option<String>,
    /// `route.put` or `route.restore_version`.
    pub action: Option<String>,
    /// The route at this version (what `PUT` takes).
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub route: serde_json::Value,
}

/// `GET /api/v1/routes/{route}/versions`: every version, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteHistory {
    /// The route's current version.
    pub version: i64,
    pub versions: Vec<RouteVersion>,
}

/// The reply to a route change (`PUT`, restore): what was written and whether Redis has it.
pub type RouteWriteReply = WriteReply;
