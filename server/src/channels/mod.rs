//! Channels: what pools draw. [`routes`] is the admin API, [`outcomes`] the data plane's
//! outcome reports, [`store`] their SQL.

pub mod outcomes;
pub mod routes;
pub mod store;

use chrono::{DateTime, Utc};
use engine::Tier;
use serde::{Deserialize, Serialize};

use crate::inputs::*;

pub use crate::inputs::ChannelCode;

/// What a channel is, besides its code and whether it is enabled.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ChannelSpec {
    pub name: DisplayName,
    /// The tier it serves in `tiers` pools (G, N or U), if any.
    #[serde(default)]
    pub tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one.
    pub base_weight: Weight,
}

/// A channel as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Channel {
    pub code: String,
    pub name: String,
    pub tier: Option<String>,
    pub enabled: bool,
    pub base_weight: i64,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The pools that hold it.
    pub pools: Vec<String>,
}
