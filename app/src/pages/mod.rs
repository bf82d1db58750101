//! One module per page.

pub mod account;
pub mod audit;
pub mod changes;
pub mod channel;
pub mod channels;
pub mod dashboard;
pub mod login;
pub mod not_found;
pub mod pool_history;
pub mod pool_limits;
pub mod pool_replay;
pub mod pool_tiers;
pub mod pools;
pub mod ramp;
pub mod routes;
pub mod tenant_list;
pub mod tenant_usage;
pub mod tenants;
pub mod users;
