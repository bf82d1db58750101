//! The page frame: header, navigation, content.

use leptos::prelude::*;
use leptos_router::components::A;

/// Header with the navigation every page shares. Sets `data-hydrated` on `<body>` once the
/// browser has hydrated the page, so that browser tests (and people) can tell.
#[component]
pub fn Layout(children: Children) -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
        }
    });
    view! {
        <header class="topbar">
            <a class="brand" href="/">"Tessera"</a>
            <nav aria-label="Main">
                <A href="/" exact=true>"Dashboard"</A>
                <A href="/pools">"Pools"</A>
                <A href="/channels">"Channels"</A>
                <A href="/tenants">"Tenants"</A>
                <A href="/audit">"Audit"</A>
            </nav>
        </header>
        <main class="content">{children()}</main>
    }
}
