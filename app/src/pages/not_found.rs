//! The page for unknown paths.

use leptos::prelude::*;

/// Shown for any path no route matches.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_actix::ResponseOptions>() {
        response.set_status(actix_web::http::StatusCode::NOT_FOUND);
    }
    view! {
        <h1>"Page not found"</h1>
        <p><a href="/">"Back to the dashboard"</a></p>
    }
}
