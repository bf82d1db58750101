//! The routes of the HTTP API, as the server registers them and clients call them. A path
//! with `{…}` takes the segment [`fill`]ed in.

/// Liveness: the process serves HTTP.
pub const HEALTHZ: &str = "/healthz";
/// Readiness: Postgres and Redis answer.
pub const READYZ: &str = "/readyz";
/// Prometheus metrics.
pub const METRICS: &str = "/metrics";
/// The OpenAPI document.
pub const OPENAPI: &str = "/api/v1/openapi.json";

pub const LOGIN: &str = "/api/v1/auth/login";
pub const LOGOUT: &str = "/api/v1/auth/logout";
pub const ME: &str = "/api/v1/auth/me";
pub const USERS: &str = "/api/v1/users";
pub const USER_ROLE: &str = "/api/v1/users/{name}/role";
pub const USER_DISABLE: &str = "/api/v1/users/{name}/disable";
pub const USER_UNLOCK: &str = "/api/v1/users/{name}/unlock";
pub const TOKENS: &str = "/api/v1/tokens";
pub const TOKEN_REVOKE: &str = "/api/v1/tokens/{id}/revoke";

pub const POOLS: &str = "/api/v1/pools";
pub const POOL: &str = "/api/v1/pools/{pool}";
pub const POOL_DRAW: &str = "/api/v1/pools/{pool}/draw";
pub const POOL_WEIGHTS: &str = "/api/v1/pools/{pool}/weights";
pub const POOL_MEMBERS: &str = "/api/v1/pools/{pool}/members";
pub const POOL_MEMBER_EJECT: &str = "/api/v1/pools/{pool}/members/{member}/eject";
pub const POOL_MEMBER_RESTORE: &str = "/api/v1/pools/{pool}/members/{member}/restore";
pub const POOL_PEAK_WINDOWS: &str = "/api/v1/pools/{pool}/peak_windows";
pub const POOL_CAPS: &str = "/api/v1/pools/{pool}/caps";
pub const POOL_REBUILD: &str = "/api/v1/pools/{pool}/rebuild";
pub const POOL_SAMPLES: &str = "/api/v1/pools/{pool}/samples";
pub const POOL_HEALTH: &str = "/api/v1/pools/{pool}/health";
pub const POOL_HEALTH_POLICY: &str = "/api/v1/pools/{pool}/health_policy";
pub const POOL_REPLAY: &str = "/api/v1/pools/{pool}/replay";

pub const CHANNELS: &str = "/api/v1/channels";
pub const CHANNEL: &str = "/api/v1/channels/{code}";
pub const CHANNEL_DISABLE: &str = "/api/v1/channels/{code}/disable";
pub const CHANNEL_ENABLE: &str = "/api/v1/channels/{code}/enable";
pub const CHANNEL_OUTCOMES: &str = "/api/v1/channels/{code}/outcomes";
pub const CHANNEL_HEALTH: &str = "/api/v1/channels/{code}/health";
pub const CHANNEL_HEALTH_HISTORY: &str = "/api/v1/channels/{code}/health/history";
pub const CHANNEL_HEALTH_PIN: &str = "/api/v1/channels/{code}/health/pin";
pub const CHANNEL_HEALTH_UNPIN: &str = "/api/v1/channels/{code}/health/unpin";

pub const PLANS: &str = "/api/v1/plans";
pub const PLAN: &str = "/api/v1/plans/{plan}";

pub const TENANTS: &str = "/api/v1/tenants";
pub const TENANT: &str = "/api/v1/tenants/{tenant}";
pub const TENANT_GRANTS: &str = "/api/v1/tenants/{tenant}/grants";
pub const TENANT_GRANT_REVOKE: &str = "/api/v1/tenants/{tenant}/grants/{id}/revoke";
pub const TENANT_USAGE: &str = "/api/v1/tenants/{tenant}/usage";
pub const TENANT_USAGE_CSV: &str = "/api/v1/tenants/{tenant}/usage.csv";
pub const QUOTA: &str = "/api/v1/tenants/{tenant}/quota";
pub const QUOTA_RESERVE: &str = "/api/v1/tenants/{tenant}/quota/reserve";
pub const QUOTA_SETTLE: &str = "/api/v1/tenants/{tenant}/quota/settle";
pub const QUOTA_RELEASE: &str = "/api/v1/tenants/{tenant}/quota/release";

pub const ROUTES: &str = "/api/v1/routes";
pub const ROUTE: &str = "/api/v1/routes/{route}";
pub const ROUTE_DRAW: &str = "/api/v1/routes/{route}/draw";
pub const ROUTE_EVALUATE: &str = "/api/v1/routes/{route}/evaluate";
pub const ROUTE_VERSIONS: &str = "/api/v1/routes/{route}/versions";
pub const ROUTE_RESTORE: &str = "/api/v1/routes/{route}/restore";

pub const AUDIT: &str = "/api/v1/audit";
pub const AUDIT_VERIFY: &str = "/api/v1/audit/verify";
pub const AUDIT_CSV: &str = "/api/v1/audit.csv";

/// `path` with each `{name}` replaced by its value, in order, percent-encoding nothing (the
/// validated names hold no character that needs it).
pub fn fill(path: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(path.len());
    let mut values = values.iter();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(&rest[..open]);
        out.push_str(values.next().copied().unwrap_or(""));
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_puts_the_values_in_order() {
        assert_eq!(fill(POOL_MEMBER_EJECT, &["cn-pay", "A"]), "/api/v1/pools/cn-pay/members/A/eject");
        assert_eq!(fill(POOLS, &[]), "/api/v1/pools");
    }
}
