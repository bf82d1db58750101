//! The guard in front of every route: who is calling (bearer token, configured admin token
//! or session cookie with its CSRF token) and whether they may.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, ResponseError};
use secrecy::ExposeSecret;

use super::sessions::session;
use super::tokens::{verify_token, TokenCache};
use super::{is_server_fn, requirement, server_fn_requirement, Permission, Principal, Via, CSRF_HEADER};
use crate::error::ApiError;
use crate::state::AppState;

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_value(req: &ServiceRequest, name: &str) -> Option<String> {
    req.cookie(name).map(|c| c.value().to_owned())
}

/// Whether an unsafe request made with a session cookie comes from this site: its Origin
/// (or, without one, its Referer) names the host the request was sent to.
fn same_origin(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("");
    let source = headers
        .get("origin")
        .or_else(|| headers.get("referer"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok());
    match source {
        Some(url) => {
            let origin_host = match url.port() {
                Some(port) => format!("{}:{port}", url.host_str().unwrap_or("")),
                None => url.host_str().unwrap_or("").to_owned(),
            };
            !host.is_empty() && origin_host.eq_ignore_ascii_case(host)
        }
        None => false,
    }
}

/// Whether the request's Host names this machine's loopback (with any port).
fn loopback_host(req: &ServiceRequest) -> bool {
    is_loopback_host(req.headers())
}

/// Whether `headers`' Host names this machine's loopback (`localhost`, 127.0.0.0/8, `[::1]`,
/// with any port).
pub(crate) fn is_loopback_host(headers: &actix_web::http::header::HeaderMap) -> bool {
    api::is_loopback_host(headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or(""))
}

async fn identify(req: &ServiceRequest, state: &AppState) -> Result<Option<Principal>, ApiError> {
    if state.auth.open {
        // Served without credentials, so only to this machine: a request whose Host is not a
        // loopback name (a rebound DNS name, a forwarded port) is refused, and a write a
        // browser sends from another site still fails the origin check.
        if !loopback_host(req) {
            return Err(ApiError::Forbidden(
                "open mode answers only requests sent to a loopback host (localhost, 127.0.0.1, [::1])".into(),
            ));
        }
        let from_a_browser = req.headers().contains_key("origin") || req.headers().contains_key("referer");
        if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) && from_a_browser && !same_origin(req)
        {
            return Err(ApiError::Forbidden(
                "cross-origin request refused: open mode takes writes from this site only".into(),
            ));
        }
        return Ok(Some(Principal { name: "open-mode".into(), via: Via::Open }));
    }
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|v| !v.is_empty());
    if let Some(given) = bearer {
        if let Some(admin) = &state.admin {
            if constant_time_eq(given.as_bytes(), admin.token.expose_secret().as_bytes()) {
                return Ok(Some(Principal { name: admin.actor.clone(), via: Via::Configured }));
            }
        }
        let Some(tokens) = req.app_data::<actix_web::web::Data<TokenCache>>() else {
            return Err(ApiError::Unexpected(anyhow::anyhow!("the API token cache is not registered with the app")));
        };
        let unknown = || ApiError::Unauthorized("the bearer token is unknown or revoked".into());
        let address =
            crate::throttle::client_address(req.peer_addr(), req.headers(), state.trusted_proxy_header.as_deref());
        let hash = super::passwords::sha256(given);
        // Found unknown a moment ago: answered from memory, no database query.
        if state.door.known_unknown(&hash) {
            state.door.unknown_token(address, hash)?;
            return Err(unknown());
        }
        // An address out of unknown tokens asks the database nothing more until it refills
        // (a token verified within the cache's time never asks it at all).
        if !tokens.is_fresh(&hash) {
            state.door.may_ask(address)?;
        }
        return match verify_token(state, tokens, given).await? {
            Some(p) => Ok(Some(p)),
            None => {
                state.door.unknown_token(address, hash)?;
                Err(unknown())
            }
        };
    }
    if let Some(id) = api::session_cookie(loopback_host(req), |name| cookie_value(req, name)) {
        // Made-up session ids cost a query each: counted against the address like unknown tokens.
        let address =
            crate::throttle::client_address(req.peer_addr(), req.headers(), state.trusted_proxy_header.as_deref());
        let hash = super::passwords::sha256(&id);
        let ended = || ApiError::Unauthorized("the session has expired or ended: sign in again".into());
        if state.door.known_unknown(&hash) {
            state.door.unknown_token(address, hash)?;
            return Err(ended());
        }
        state.door.may_ask(address)?;
        let found = session(&state.auth_db, &id, state.auth.idle_ttl).await?;
        let Some(p) = found else {
            state.door.unknown_token(address, hash)?;
            return Err(ended());
        };
        if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            // A cross-site form cannot read the CSRF token, and cannot claim our origin.
            if !same_origin(req) {
                return Err(ApiError::Forbidden(
                    "cross-origin request refused: unsafe requests with a session must come from this site".into(),
                ));
            }
            let Via::Session { csrf, .. } = &p.via else { unreachable!("a session principal") };
            let given = req.headers().get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !constant_time_eq(given.as_bytes(), csrf.as_bytes()) {
                return Err(ApiError::Forbidden(format!(
                    "missing or wrong {CSRF_HEADER} header (the CSRF token given at sign-in)"
                )));
            }
        }
        return Ok(Some(p));
    }
    Ok(None)
}

/// A page of the UI (a route of the app other than the sign-in page), asked for to be read.
fn is_ui_page(req: &ServiceRequest, pattern: Option<&str>) -> bool {
    const NOT_PAGES: [&str; 5] = ["/login", "/healthz", "/readyz", "/readyz/details", "/metrics"];
    matches!(*req.method(), Method::GET | Method::HEAD)
        && pattern.is_some_and(|p| {
            p.starts_with('/') && !p.starts_with("/api/") && !p.starts_with("/pkg") && !NOT_PAGES.contains(&p)
        })
}

/// 303 to the sign-in page, which comes back to `path` (and its query) once signed in.
fn to_sign_in(path: &str, query: &str) -> actix_web::HttpResponse {
    let back = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
    let next: String = url::form_urlencoded::byte_serialize(back.as_bytes()).collect();
    actix_web::HttpResponse::SeeOther().insert_header(("location", format!("/login?next={next}"))).finish()
}

/// The guard in front of every route: finds the route's requirement, identifies the
/// caller, and answers 401 (no or bad credentials) or 403 (not allowed) before the
/// handler runs. The caller is left in the request's extensions for the handler.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // Decide on the path the router routes by: percent-decoded (all but %, / and +), so
    // `/api/v%31/users` is judged as the `/api/v1/users` it reaches, never as a stranger.
    // Open mode answers this machine only, whatever the path (pages render with admin data).
    if req.app_data::<actix_web::web::Data<AppState>>().is_some_and(|s| s.auth.open) && !loopback_host(&req) {
        let e = ApiError::Forbidden("open mode answers only requests sent to a loopback host".into());
        return Ok(req.into_response(e.error_response()));
    }
    let path = req.match_info().as_str().to_owned();
    let pattern = req.resource_map().match_pattern(&path);
    let needed = match pattern.as_deref() {
        _ if is_server_fn(&path) => server_fn_requirement(&path),
        Some(p) => requirement(req.method(), p),
        // Unmatched paths under the API: admins only (they 404 after the guard).
        None if path.starts_with("/api/") || req.path().starts_with("/api/") => Some(Permission::ManageAccess),
        None => None,
    };
    let Some(needed) = needed else {
        if !is_server_fn(&path) && is_ui_page(&req, pattern.as_deref()) {
            if let Some(state) = req.app_data::<actix_web::web::Data<AppState>>().cloned() {
                if !matches!(identify(&req, &state).await, Ok(Some(_))) {
                    let to = to_sign_in(&path, req.query_string());
                    return Ok(req.into_response(to));
                }
            }
        }
        return next.call(req).await.map(ServiceResponse::map_into_boxed_body);
    };
    let Some(state) = req.app_data::<actix_web::web::Data<AppState>>().cloned() else {
        return next.call(req).await.map(ServiceResponse::map_into_boxed_body);
    };
    let refuse = |req: ServiceRequest, e: ApiError| Ok(req.into_response(e.error_response()));
    let principal = match identify(&req, &state).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return refuse(
                req,
                ApiError::Unauthorized("no credentials: sign in, or send an API token as Authorization: Bearer".into()),
            );
        }
        Err(e) => return refuse(req, e),
    };
    if !principal.may(needed) {
        let e = ApiError::Forbidden(format!("{} may not {needed} ({} {path})", principal.describe(), req.method()));
        return refuse(req, e);
    }
    req.extensions_mut().insert(principal);
    next.call(req).await.map(ServiceResponse::map_into_boxed_body)
}
