//! The Content-Security-Policy of every page the server renders: scripts only from this
//! origin or inline with the response's nonce (Leptos puts it on its hydration scripts),
//! WebAssembly compiled, styles only from this origin's stylesheet, nothing framing the
//! console. The server adds the headers that do not depend on the page (see the server's
//! `security_headers`).

/// The policy of a page whose inline scripts carry `nonce`.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; \
         img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

/// Sets the page's policy on the response being rendered (on the server; nothing in the
/// browser).
pub fn set_page_policy() {
    #[cfg(feature = "ssr")]
    {
        use leptos::prelude::use_context;
        let (Some(nonce), Some(response)) =
            (leptos::nonce::use_nonce(), use_context::<leptos_actix::ResponseOptions>())
        else {
            return;
        };
        if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&page_policy(&nonce.to_string())) {
            response.insert_header(actix_web::http::header::CONTENT_SECURITY_POLICY, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_only_this_origin_and_the_nonce_and_no_framing() {
        let policy = page_policy("abc123");

        assert!(policy.contains("script-src 'self' 'nonce-abc123' 'wasm-unsafe-eval';"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(policy.contains("object-src 'none'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert!(!policy.replace("'wasm-unsafe-eval'", "").contains("unsafe-eval"), "{policy}");
    }
}
