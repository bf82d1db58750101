//! Ticket pools as the pools pages show them: the list, and one pool's members with their
//! configured and effective weights and health.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A pool in the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolListing {
    pub name: String,
    /// `channels` or `tiers`.
    pub kind: String,
    /// The configuration version (what a weights change is checked against).
    pub version: i64,
    /// The newest published snapshot's version.
    pub published_version: i64,
    pub members: i64,
    /// Members ejected or disabled.
    pub ejected: i64,
}

/// One entry of the pool's configured weights (channels, or a tiers pool's tiers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightEntry {
    pub member: String,
    pub weight: u64,
}

/// One member channel with its health.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    pub channel: String,
    /// `healthy`, `degraded`, `ejected`, `recovering`, …
    pub state: String,
    /// A pin set by an operator, if any.
    pub pinned: Option<String>,
    /// The configured weight.
    pub base_weight: i64,
    /// The weight draws use now (health, ejection and disabling applied).
    pub effective_weight: u64,
}

/// A peak window as configured: local times `HH:MM`, the batch multiplier, and the
/// window's own weights if it has any (kept as they are by the peak-window editor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakWindowView {
    pub start: String,
    pub end: String,
    pub multiplier: u32,
    pub weights: Option<serde_json::Value>,
}

/// One pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDetail {
    pub name: String,
    pub kind: String,
    pub version: i64,
    /// Tickets per batch, and how a batch is ordered (`smooth` or `shuffle`): what the
    /// weights editor's preview builds.
    pub batch_size: u32,
    pub ordering: String,
    /// The IANA timezone of the pool's day, caps and peak windows.
    pub timezone: String,
    pub weights: Vec<WeightEntry>,
    pub members: Vec<MemberView>,
    pub peak_windows: Vec<PeakWindowView>,
    /// Most draws per member per local day, by member; members without a cap are absent.
    pub caps: Vec<(String, u64)>,
}

/// Rows per page of the pools list.
pub const POOL_PAGE_SIZE: u32 = 50;

/// How the pools list may be sorted: the `sort` value and what the page calls it.
pub const POOL_SORTS: [(&str, &str); 4] = [
    ("name", "Name"),
    ("kind", "Kind, then name"),
    ("members", "Members, most first"),
    ("out", "Members out, most first"),
];

/// A page of the pools list (its default sort is `name`).
pub type PoolList = super::lists::ListPage<PoolListing>;

/// A page of pools whose name holds `q` (any case), sorted by one of [`POOL_SORTS`], for
/// any signed-in user. The query's parts are separate optional arguments, so that a query
/// string without them reads as "the first page of every pool".
#[server(prefix = "/sfn", endpoint = "pools", input = GetUrl)]
pub async fn list_pools(q: Option<String>, sort: Option<String>, page: Option<u32>) -> Result<PoolList, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.pools(super::lists::ListQuery { q, sort, page }).await.map_err(ServerFnError::new)
}

/// One pool (`None` when there is no such pool), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "pool", input = GetUrl)]
pub async fn get_pool(name: String) -> Result<Option<PoolDetail>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.pool(name).await.map_err(ServerFnError::new)
}

/// A pool's recorded configuration versions, newest first (`None` when there is no such
/// pool), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "pool_versions", input = GetUrl)]
pub async fn pool_versions(name: String) -> Result<Option<api::pools::PoolHistory>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.pool_history(name).await.map_err(ServerFnError::new)
}

/// A tiers pool's tier policy, each channel's streak and the newest moves (`None` when
/// there is no such pool), for any signed-in user.
#[server(prefix = "/sfn", endpoint = "pool_tiers", input = GetUrl)]
pub async fn pool_tiers(name: String) -> Result<Option<api::tiers::AdaptiveTiers>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.pool_tiers(name).await.map_err(ServerFnError::new)
}
