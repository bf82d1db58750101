//! Server functions. Each one calls the server's services through [`Backend`], which the
//! server provides as context: the UI and the REST API share one implementation, and this
//! crate never talks to Postgres or Redis itself.

pub mod access;
pub mod attention;
pub mod audit;
pub mod changes;
pub mod channels;
pub mod dashboard;
pub mod lists;
pub mod pools;
pub mod ramps;
pub mod rest;
pub mod routes;
pub mod session;
pub mod status;
pub mod tenants;

pub use access::{list_access, AccessView, TokenView, UserView};
pub use audit::{list_audit, verify_audit_chain, AuditQuery, AuditRecord, AuditRecords, AuditView, ChainStatus};
pub use channels::{
    channel_history, list_channels, ChannelDetail, ChannelList, ChannelPoolHealth, ChannelQuery, ChannelView,
    DecayPoint, OutcomeMinute, PoolDecay,
};
pub use dashboard::{get_dashboard, Dashboard};
pub use pools::{get_pool, list_pools, MemberView, PeakWindowView, PoolDetail, PoolList, PoolListing, WeightEntry};
pub use session::{whoami, SessionInfo, SESSION_COOKIE};
pub use status::{get_system_status, DependencyStatus, SystemStatus};
pub use tenants::{
    get_tenant, list_tenant_page, BucketView, DayUsage, GrantView, OpenView, TenantList, TenantQuery, TenantRow,
    TenantUse, TenantView, UsageView,
};

/// `value` as it may stand in a URL's query: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - _ . ~`) percent-encoded.
pub fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Why the server could not answer a server function: what the UI shows in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// A dependency (Postgres, Redis) did not answer; trying again may help.
    Unavailable(String),
    /// An argument broke a rule, naming the field and the rule.
    Invalid { field: String, rule: String },
}

impl BackendError {
    /// An argument that broke a rule.
    pub fn invalid(field: impl Into<String>, rule: impl std::fmt::Display) -> Self {
        Self::Invalid { field: field.into(), rule: rule.to_string() }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable(why) => f.write_str(why),
            Self::Invalid { field, rule } => write!(f, "{field}: {rule}"),
        }
    }
}

impl std::error::Error for BackendError {}

/// The prefix under which server functions are served, apart from the REST API's `/api/v1`.
pub const SERVER_FN_PREFIX: &str = "/sfn";

#[cfg(feature = "ssr")]
pub use backend::{Backend, SharedBackend};

#[cfg(feature = "ssr")]
mod backend {
    use std::sync::Arc;

    use super::{
        AuditQuery, AuditRecords, ChainStatus, ChannelList, ChannelQuery, PoolDetail, SessionInfo, SystemStatus,
        TenantList, TenantQuery, TenantView,
    };
    use super::{TokenView, UserView};

    /// What the server offers the UI. Implemented by the server's application state.
    #[async_trait::async_trait]
    pub trait Backend: Send + Sync + 'static {
        /// Postgres, Redis and snapshot status, as the dashboard shows it.
        async fn system_status(&self) -> SystemStatus;

        /// The person behind a session cookie's value; `None` when there is no cookie, or
        /// its session ended or expired. In open mode (development), everyone is an admin.
        async fn whoami(&self, session_cookie: Option<String>) -> Result<Option<SessionInfo>, super::BackendError>;

        /// A page of audit rows matching `query`, newest first; an error names a
        /// malformed filter or says Postgres is unreachable.
        async fn audit(&self, query: AuditQuery) -> Result<AuditRecords, super::BackendError>;

        /// Recomputes the audit hash chain.
        async fn verify_audit(&self) -> Result<ChainStatus, super::BackendError>;

        /// A page of pools matching `query` (searched, sorted and paged on the server); an
        /// error names a malformed `q`, `sort` or `page`.
        async fn pools(&self, query: super::lists::ListQuery) -> Result<super::pools::PoolList, super::BackendError>;

        /// One pool with its members' health; `None` for an unknown pool.
        async fn pool(&self, name: String) -> Result<Option<PoolDetail>, super::BackendError>;

        /// A page of channels matching `query` (searched, sorted and paged on the server),
        /// each with its pin and its health in each pool holding it; an error names a
        /// malformed `q`, `sort` or `page`.
        async fn channels(&self, query: ChannelQuery) -> Result<ChannelList, super::BackendError>;

        /// One channel with its health transitions in each pool holding it (the newest
        /// 500), oldest first; `None` for an unknown channel.
        async fn channel_history(&self, code: String) -> Result<Option<super::ChannelDetail>, super::BackendError>;

        /// A page of tenants matching `query` (searched, sorted and paged in Postgres), each
        /// with its use now; an error names a malformed `q`, `sort` or `page`.
        async fn tenant_list(&self, query: TenantQuery) -> Result<TenantList, super::BackendError>;

        /// One tenant with its limits, grants, quota usage now and this month's use per
        /// day; `None` for an unknown tenant.
        async fn tenant(&self, name: String) -> Result<Option<TenantView>, super::BackendError>;

        /// The dashboard's pools (the last hour's samples, health, draws by source) and
        /// quota overview, in one call.
        async fn dashboard(&self) -> Result<super::Dashboard, super::BackendError>;

        /// A page of users matching `query` (the users page; admins only, which the caller
        /// checks); an error names a malformed `q`, `sort` or `page`.
        async fn users(
            &self,
            query: super::lists::ListQuery,
        ) -> Result<super::lists::ListPage<UserView>, super::BackendError>;

        /// Every API token, by id, never its secret (the users page; admins only).
        async fn tokens(&self) -> Result<Vec<TokenView>, super::BackendError>;

        /// A page of change requests matching `query`, with their reviews; an error names a
        /// malformed `q`, `state`, `author`, `sort` or `page`.
        async fn change_list(
            &self,
            query: super::changes::ChangeQuery,
        ) -> Result<super::changes::ChangeList, super::BackendError>;

        /// A pool's tier policy, each channel's streak and the newest moves; `None` for no
        /// such pool.
        async fn pool_tiers(&self, pool: String) -> Result<Option<api::tiers::AdaptiveTiers>, super::BackendError>;

        /// A pool's recorded configuration versions, newest first; `None` for no such pool.
        async fn pool_history(&self, pool: String) -> Result<Option<api::pools::PoolHistory>, super::BackendError>;

        /// The break-glass flags not acknowledged yet, newest first.
        async fn break_glass(&self) -> Result<Vec<api::changes::BreakGlass>, super::BackendError>;

        /// A pool's newest ramp with its timeline, events and samples; `None` when it has none.
        async fn pool_ramp(&self, pool: String) -> Result<Option<api::ramps::RampDetail>, super::BackendError>;

        /// The live ramps (running, paused, aborting), newest first.
        async fn live_ramps(&self) -> Result<Vec<api::ramps::RampSummary>, super::BackendError>;

        /// Every route, by name.
        async fn routes(&self) -> Result<Vec<api::routes::RouteSummary>, super::BackendError>;

        /// One route with every pool's name and the policy that applies; `None` for no
        /// such route.
        async fn route(&self, name: String) -> Result<Option<super::routes::RouteView>, super::BackendError>;
    }

    /// The form in which the server provides its [`Backend`] as Leptos context.
    pub type SharedBackend = Arc<dyn Backend>;

    /// The backend provided for this request.
    pub fn backend() -> Result<SharedBackend, leptos::prelude::ServerFnError> {
        leptos::prelude::use_context::<SharedBackend>()
            .ok_or_else(|| leptos::prelude::ServerFnError::new("the server did not provide its backend"))
    }
}

#[cfg(feature = "ssr")]
pub(crate) use backend::backend;

#[cfg(test)]
mod tests {
    use leptos::server_fn::ServerFn;

    #[test]
    fn every_server_function_is_served_under_the_server_fn_prefix() {
        // `#[server(prefix = …)]` takes a literal; this keeps it equal to the constant the
        // server routes.
        for path in [
            <super::status::GetSystemStatus as ServerFn>::PATH,
            <super::session::Whoami as ServerFn>::PATH,
            <super::audit::ListAudit as ServerFn>::PATH,
            <super::audit::VerifyAuditChain as ServerFn>::PATH,
            <super::pools::ListPools as ServerFn>::PATH,
            <super::pools::GetPool as ServerFn>::PATH,
            <super::pools::PoolTiers as ServerFn>::PATH,
            <super::channels::ListChannels as ServerFn>::PATH,
            <super::channels::ChannelHistory as ServerFn>::PATH,
            <super::tenants::ListTenantPage as ServerFn>::PATH,
            <super::tenants::GetTenant as ServerFn>::PATH,
            <super::dashboard::GetDashboard as ServerFn>::PATH,
            <super::access::ListAccess as ServerFn>::PATH,
            <super::ramps::PoolRamp as ServerFn>::PATH,
            <super::ramps::LiveRamps as ServerFn>::PATH,
            <super::routes::ListRoutes as ServerFn>::PATH,
            <super::routes::GetRoute as ServerFn>::PATH,
        ] {
            assert!(path.starts_with(&format!("{}/", super::SERVER_FN_PREFIX)), "{path}");
        }
    }
}
