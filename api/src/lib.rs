//! The shapes of Tessera's HTTP API, shared by the server (which answers with them), the
//! client and the UI (which send and read them): the validated names, the exact-integer
//! limit, the session cookie's name, the dependency status, and the
//! replies of the `/api/v1` routes (a module per resource; [`writes`] is the reply every
//! audited write shares). Timestamps in replies are RFC 3339 strings, as the server
//! writes them. Every name here parses into a type that can only hold a valid value, and
//! a refusal names the field and the rule ([`Invalid`]). With the `utoipa` feature each type carries its OpenAPI
//! schema, rules included (patterns, lengths, ranges).

pub mod access;
pub mod changes;
pub mod channels;
pub mod health;
pub mod names;
pub mod plans;
pub mod pools;
pub mod ramps;
pub mod replay;
pub mod routes;
pub mod status;
pub mod tenants;
pub mod tiers;
pub mod writes;

pub use names::{ChannelCode, DisplayName, Invalid, PlanName, UserName};
pub use status::{Alive, DependencyStatus, Readiness, Ready, SystemStatus};
pub use writes::{WriteReply, Written};

/// The largest weight, amount or count the API takes: 2^53 − 1, which JSON numbers and
/// Lua hold exactly.
pub const MAX_INTEGER: u64 = engine::quota::MAX_AMOUNT;

/// The session cookie's name over plain HTTP on a loopback address (set by
/// `POST /api/v1/auth/login`, read by the guard and by the UI's server functions).
pub const SESSION_COOKIE: &str = "tessera_session";

/// The session cookie's name when it is Secure (over TLS, or anywhere but loopback): the
/// `__Host-` prefix makes the browser refuse it unless Secure, for this host only, path `/`.
pub const SECURE_SESSION_COOKIE: &str = "__Host-tessera_session";

/// The session id a request carries: the Secure cookie's, else (only for a request to a
/// loopback host, where the plain cookie is ever set) the plain one's. `cookie` reads a
/// cookie's value by name. Elsewhere a plain cookie is ignored: a sibling domain or a man
/// in the middle could plant one to fix a session on a victim.
pub fn session_cookie(loopback: bool, cookie: impl Fn(&str) -> Option<String>) -> Option<String> {
    cookie(SECURE_SESSION_COOKIE).or_else(|| if loopback { cookie(SESSION_COOKIE) } else { None })
}

/// Whether a `Host` header's value names this machine's loopback (`localhost`, 127.0.0.0/8,
/// `[::1]`, with any port).
pub fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The header unsafe requests made with the session cookie repeat its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
