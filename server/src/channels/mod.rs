//! Channels: what pools draw. [`routes`] is the admin API, [`outcomes`] the data plane's
//! outcome reports, [`store`] their SQL.

pub mod outcomes;
pub mod routes;
pub mod store;

use engine::Tier;
use serde::Deserialize;

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

/// A channel as stored, with the pools that hold it: defined in `api`, it is what the
/// channel routes answer.
pub use api::channels::Channel;
