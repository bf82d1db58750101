//! Tessera's admin UI: a Leptos app rendered on the server (feature `ssr`) and hydrated in
//! the browser (feature `hydrate`, the wasm entry point [`hydrate`]).
//!
//! Layout:
//! - [`shell`] and [`App`]: the HTML document, the layout and the router.
//! - `pages/`: one module per page.
//! - `api/`: server functions, each calling the server's services through [`api::Backend`].
//! - `components/`: pieces shared by pages.
#![forbid(unsafe_code)]
// Deep view types (a page of forms inside tables) need more than the default 128.
#![recursion_limit = "256"]

pub mod api;
mod components;
mod pages;
pub mod security;

/// A count with thousands separated by commas, as every page writes large numbers.
pub use components::charts::grouped;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{ParamSegment, SsrMode, StaticSegment};

use components::layout::Layout;

/// The name of the wasm, js and css files under `/pkg` (scripts/build writes them).
pub const OUTPUT_NAME: &str = "tessera";

/// This build's id (16 hex digits, from `build.rs`): the server binary and the wasm bundle
/// of one build carry the same, and views only hydrate what the same build rendered.
pub const BUILD_ID: &str = env!("TESSERA_BUILD_ID");

/// What precedes the id in the bundle's data, so that the server can read a bundle's id
/// from its `.wasm` file: [`BUILD_MARKER`] is `tessera-build-id:<16 hex digits>.`.
pub const BUILD_MARKER_PREFIX: &str = "tessera-build-id:";

/// [`BUILD_ID`] as it is stored in the bundle (read by [`hydrate`], so it stays in the wasm).
pub const BUILD_MARKER: &str = concat!("tessera-build-id:", env!("TESSERA_BUILD_ID"), ".");

/// The build id in a bundle (the bytes of its `.wasm` file), if it has a well-formed one.
pub fn bundle_build_id(wasm: &[u8]) -> Option<&str> {
    let prefix = BUILD_MARKER_PREFIX.as_bytes();
    let mut rest = wasm;
    while let Some(at) = rest.windows(prefix.len()).position(|window| window == prefix) {
        let candidate = &rest[at + prefix.len()..];
        if let Some(id) = candidate.get(..BUILD_ID.len() + 1).and_then(|id| id.strip_suffix(b".")) {
            if id.iter().all(|b| b.is_ascii_hexdigit()) {
                return std::str::from_utf8(id).ok();
            }
        }
        rest = candidate;
    }
    None
}

/// The whole HTML document rendered on the server around [`App`].
pub fn shell(options: LeptosOptions) -> impl IntoView {
    security::set_page_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="tessera-build" content=BUILD_ID/>
                <link rel="icon" href="data:,"/>
                <HydrationScripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The application: layout, navigation and routes. Pages that need a session render
/// whole before the response starts (`SsrMode::Async`), so that a signed-out visitor gets
/// a real redirect to the sign-in page rather than a page that navigates away.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="tessera" href=format!("/pkg/{OUTPUT_NAME}.css")/>
        <Title text="Tessera"/>
        <Router>
            <Layout>
                <Routes fallback=pages::not_found::NotFound>
                    <Route path=StaticSegment("login") view=pages::login::Login/>
                    <Route path=StaticSegment("") view=pages::dashboard::Dashboard ssr=SsrMode::Async/>
                    <Route path=StaticSegment("pools") view=pages::pools::Pools ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("pools"), ParamSegment("name")) view=pages::pools::PoolPage ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("pools"), ParamSegment("name"), StaticSegment("ramp")) view=pages::ramp::RampPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("routes") view=pages::routes::RouteList ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("routes"), ParamSegment("name")) view=pages::routes::RoutePage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("channels") view=pages::channels::Channels ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("channels"), ParamSegment("code")) view=pages::channel::ChannelPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("tenants") view=pages::tenant_list::Tenants ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("tenants"), ParamSegment("name")) view=pages::tenants::TenantPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("audit") view=pages::audit::Audit ssr=SsrMode::Async/>
                    <Route path=StaticSegment("changes") view=pages::changes::Changes ssr=SsrMode::Async/>
                    <Route path=StaticSegment("users") view=pages::users::Users ssr=SsrMode::Async/>
                    <Route path=StaticSegment("account") view=pages::account::Account ssr=SsrMode::Async/>
                </Routes>
            </Layout>
        </Router>
    }
}

/// The browser entry point: hydrates the server-rendered page, unless another build of the
/// server rendered it (a bundle cached by the browser, or a site folder from another build):
/// then views would not match and hydration would panic, so it says why and leaves the page
/// as rendered.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // Read through black_box: the marker must stay in the wasm for the server to find.
    let own = bundle_build_id(std::hint::black_box(BUILD_MARKER).as_bytes());
    let page = document()
        .query_selector("meta[name=tessera-build]")
        .ok()
        .flatten()
        .and_then(|meta| meta.get_attribute("content"));
    if own.is_none() || page.as_deref() != own {
        leptos::logging::error!(
            "not hydrating: this page comes from server build {page:?} and this bundle is build {own:?}; \
             reload, or rebuild the site with the server (scripts/build)"
        );
        return;
    }
    leptos::mount::hydrate_body(App);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_s_build_id_is_read_past_a_bare_prefix() {
        let wasm = [b"\0asm..tessera-build-id:xyz".as_slice(), BUILD_MARKER.as_bytes(), b"\0rest".as_slice()].concat();
        assert_eq!(bundle_build_id(&wasm), Some(BUILD_ID));
    }

    #[test]
    fn a_bundle_without_a_well_formed_marker_has_no_build_id() {
        assert_eq!(bundle_build_id(b"\0asm tessera-build-id:0123456789abcdef"), None);
        assert_eq!(bundle_build_id(b"\0asm"), None);
    }
}
