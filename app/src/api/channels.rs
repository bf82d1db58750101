//! Channels as the channels page shows them: each with its pools and its health in each,
//! and its pin. Changes go to the REST API from the browser (see `pages/channels.rs`).

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A channel's health in one pool that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPoolHealth {
    pub pool: String,
    /// `healthy`, `degraded`, `ejected`, `recovering`, …
    pub state: String,
    /// The weight draws use now in this pool (0 when disabled or ejected).
    pub effective_weight: u64,
}

/// One channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelView {
    pub code: String,
    pub name: String,
    /// `G`, `N` or `U` for channels serving a tier.
    pub tier: Option<String>,
    pub enabled: bool,
    pub base_weight: i64,
    /// The channel's configuration version.
    pub version: i64,
    /// An operator's pin (`healthy` or `ejected`), if any.
    pub pin: Option<String>,
    /// Every pool holding it, with its health there.
    pub pools: Vec<ChannelPoolHealth>,
}

/// Rows per page of the channels list.
pub const CHANNEL_PAGE_SIZE: u32 = 50;

/// How the channels list may be sorted: the `sort` value and what the page calls it.
pub const CHANNEL_SORTS: [(&str, &str); 4] = [
    ("code", "Code"),
    ("attention", "Needs attention first (disabled, ejected, decaying, pinned)"),
    ("name", "Name"),
    ("weight", "Base weight, largest first"),
];

/// The channels list's query: `q` matches part of a code or a name (any case), `sort` is one
/// of [`CHANNEL_SORTS`].
pub type ChannelQuery = super::lists::ListQuery;

/// A page of the channels list (its default sort is `code`).
pub type ChannelList = super::lists::ListPage<ChannelView>;

/// How much a channel needs a person's attention: lower first (disabled, then ejected
/// somewhere, then decaying or recovering somewhere, then pinned, then the rest).
pub fn attention_rank(c: &ChannelView) -> u8 {
    if !c.enabled {
        return 0;
    }
    let worst = c.pools.iter().map(|p| p.state.as_str());
    let mut rank = 4;
    for state in worst {
        rank = rank.min(match state {
            "ejected" => 1,
            "healthy" => 4,
            _ => 2,
        });
    }
    if rank == 4 && c.pin.is_some() {
        rank = 3;
    }
    rank
}

/// A page of channels, searched, sorted and paged on the server, for any signed-in user.
/// The query's parts are separate optional arguments, so that a query string without them
/// reads as "the first page of everything".
#[server(prefix = "/sfn", endpoint = "channels", input = GetUrl)]
pub async fn list_channels(
    q: Option<String>,
    sort: Option<String>,
    page: Option<u32>,
) -> Result<ChannelList, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.channels(ChannelQuery { q, sort, page }).await.map_err(ServerFnError::new)
}

/// One change of a channel's health in one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecayPoint {
    /// When (RFC 3339, UTC), and the same as milliseconds since the epoch (for the chart).
    pub at: String,
    pub at_ms: i64,
    pub from: String,
    pub to: String,
    /// The weight draws used before and after the change.
    pub weight_before: u64,
    pub effective_weight: u64,
    pub success_rate: Option<f64>,
    pub reason: String,
}

/// A channel's health history in one pool, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDecay {
    pub pool: String,
    /// The pool's health policy: a window below this success rate fails (0..1) …
    pub min_success_rate: f64,
    /// … when it holds at least this many outcomes.
    pub min_volume: u64,
    pub base_weight: u64,
    /// Now: state and weight.
    pub state: String,
    pub effective_weight: u64,
    pub points: Vec<DecayPoint>,
}

/// One minute of a channel's outcome reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeMinute {
    /// The minute's start, ms since the epoch.
    pub at_ms: i64,
    pub ok: u64,
    pub fail: u64,
    /// The mean latency reported in that minute, when any was.
    pub latency_ms: Option<f64>,
}

impl OutcomeMinute {
    /// ok / (ok + fail), when there was any outcome.
    pub fn success_rate(&self) -> Option<f64> {
        let total = self.ok + self.fail;
        (total > 0).then(|| self.ok as f64 / total as f64)
    }
}

/// A channel with its health history in every pool that holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelDetail {
    pub code: String,
    pub name: String,
    pub enabled: bool,
    pub pin: Option<String>,
    /// When the page was rendered (ms since the epoch): the charts' right edge.
    pub now_ms: i64,
    pub pools: Vec<PoolDecay>,
    /// The last hour's outcome reports per minute (minutes without reports left out), or
    /// why they could not be read.
    pub outcomes: Result<Vec<OutcomeMinute>, String>,
}

/// One channel with its health history (`None` for an unknown channel), for any
/// signed-in user.
#[server(prefix = "/sfn", endpoint = "channel_history", input = GetUrl)]
pub async fn channel_history(code: String) -> Result<Option<ChannelDetail>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.channel_history(code).await.map_err(ServerFnError::new)
}
