//! The security headers of every response, pages and API alike: nothing may frame the
//! console (`frame-ancestors 'none'` and `X-Frame-Options: DENY`: a framed Disable button
//! is a click-jacking target), no content sniffing, referrers kept to this origin, and HSTS
//! when the request came over TLS (directly or through a proxy that says so in
//! `Forwarded` / `X-Forwarded-Proto`). Pages carry their own Content-Security-Policy with the
//! response's nonce (`app::security`); any other response gets one that allows nothing.
//! Everything but the static bundle is `Cache-Control: private, no-store` unless it says
//! otherwise: pages, server functions and the API answer per person.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::middleware::Next;

/// The policy of a response that is not a page (JSON, the bundle's files, errors).
pub const DEFAULT_POLICY: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Two years, subdomains included: what a console served over TLS asks of browsers.
pub const HSTS: &str = "max-age=63072000; includeSubDomains";

/// The middleware: adds the headers to every response. Refusals and handler errors reach it
/// as responses (the access guard and the handlers answer them); an error a layer below
/// raises instead is turned into its response by actix-web after this layer, without them.
/// (The request is not kept to build that response here: a clone held across the call
/// breaks the router, which needs the only reference.)
pub async fn security_headers(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let over_tls = req.connection_info().scheme() == "https";
    let asset = req.path().starts_with("/pkg/") || req.path() == "/favicon.ico";
    let mut response = next.call(req).await?;
    add(response.headers_mut(), over_tls);
    // Pages, server functions and the API answer per person: no shared cache keeps them.
    if !asset && !response.headers().contains_key(header::CACHE_CONTROL) {
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    }
    Ok(response)
}

/// Adds the headers to `headers`, keeping a Content-Security-Policy a page set itself.
pub fn add(headers: &mut HeaderMap, over_tls: bool) {
    let fixed: [(HeaderName, &'static str); 4] = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(DEFAULT_POLICY));
    }
    if over_tls {
        headers.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_its_own_policy_and_hsts_comes_only_over_tls() {
        let mut page = HeaderMap::new();
        page.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'self'"));
        add(&mut page, false);
        let mut api = HeaderMap::new();
        add(&mut api, true);

        assert_eq!(page.get(header::CONTENT_SECURITY_POLICY).unwrap(), "default-src 'self'");
        assert!(page.get(header::STRICT_TRANSPORT_SECURITY).is_none());
        assert_eq!(page.get(header::X_FRAME_OPTIONS).unwrap(), "DENY");
        assert_eq!(api.get(header::CONTENT_SECURITY_POLICY).unwrap(), DEFAULT_POLICY);
        assert_eq!(api.get(header::STRICT_TRANSPORT_SECURITY).unwrap(), HSTS);
        assert_eq!(api.get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
    }
}
