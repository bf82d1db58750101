//! Sections whose data comes with later pieces of work: each says plainly what it will hold
//! and that it has no data source yet, rather than showing made-up rows.

use leptos::prelude::*;

#[component]
fn Pending(title: &'static str, what: &'static str) -> impl IntoView {
    view! {
        <h1>{title}</h1>
        <p class="notice">{what}" This section has no data source yet: the control-plane API it reads is not built."</p>
    }
}

/// Channels.
#[component]
pub fn Channels() -> impl IntoView {
    view! { <Pending title="Channels" what="Channels, tiers, health state and effective weights."/> }
}

/// Tenants.
#[component]
pub fn Tenants() -> impl IntoView {
    view! { <Pending title="Tenants" what="Tenants, plans, grants and quota usage."/> }
}
