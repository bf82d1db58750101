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

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{ParamSegment, SsrMode, StaticSegment};

use components::layout::Layout;

/// The name cargo-leptos gives the wasm, js and css files under `/pkg`.
pub const OUTPUT_NAME: &str = "tessera";

/// The whole HTML document rendered on the server around [`App`].
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
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
                    <Route path=StaticSegment("channels") view=pages::channels::Channels ssr=SsrMode::Async/>
                    <Route path=(StaticSegment("channels"), ParamSegment("code")) view=pages::channel::ChannelPage ssr=SsrMode::Async/>
                    <Route path=StaticSegment("tenants") view=pages::tenants::Tenants ssr=SsrMode::Async/>
                    <Route path=StaticSegment("audit") view=pages::audit::Audit ssr=SsrMode::Async/>
                    <Route path=StaticSegment("users") view=pages::users::Users ssr=SsrMode::Async/>
                </Routes>
            </Layout>
        </Router>
    }
}

/// The browser entry point: hydrates the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
