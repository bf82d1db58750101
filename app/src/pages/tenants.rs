//! Tenants, read-only: each tenant's plan and limits, its grants (revoked ones marked) and
//! its quota usage per bucket as it stands now.

use leptos::prelude::*;

use crate::api::{list_tenants, GrantView, TenantView, UsageView};

/// Every tenant.
#[component]
pub fn Tenants() -> impl IntoView {
    let tenants = Resource::new(|| (), |_| list_tenants());
    view! {
        <h1>"Tenants"</h1>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match tenants.await {
                    Ok(list) if list.is_empty() => view! { <p>"No tenants yet."</p> }.into_any(),
                    Ok(list) => view! {
                        <div id="tenants">{list.into_iter().map(|t| view! { <TenantCard tenant=t/> }).collect_view()}</div>
                    }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the tenants: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn TenantCard(tenant: TenantView) -> impl IntoView {
    let heading = format!("tenant-{}-heading", tenant.name);
    let labelled_by = heading.clone();
    let usage = match tenant.usage {
        Ok(usage) => view! { <Usage tenant=tenant.name.clone() usage/> }.into_any(),
        Err(why) => view! { <p class="notice">{why}</p> }.into_any(),
    };
    view! {
        <section class="card" data-tenant=tenant.name.clone() aria-labelledby=labelled_by>
            <h2 id=heading>"Tenant " <code>{tenant.name.clone()}</code></h2>
            <dl class="facts">
                <dt>"Plan"</dt><dd>{tenant.plan}</dd>
                <dt>"Tokens a month"</dt><dd>{tenant.monthly_tokens}</dd>
                <dt>"Requests a day"</dt><dd>{tenant.daily_requests}</dd>
                <dt>"Concurrent reservations"</dt><dd>{tenant.concurrency}</dd>
                <dt>"Configuration version"</dt><dd>{tenant.version}</dd>
            </dl>
            <h3>"Grants"</h3>
            <Grants tenant=tenant.name.clone() grants=tenant.grants/>
            <h3>"Usage now"</h3>
            {usage}
        </section>
    }
    .into_any()
}

#[component]
fn Grants(tenant: String, grants: Vec<GrantView>) -> impl IntoView {
    if grants.is_empty() {
        return view! { <p>"No grants."</p> }.into_any();
    }
    view! {
        <table class="grid" id=format!("grants-{tenant}")>
            <thead>
                <tr>
                    <th scope="col">"Grant"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Tokens"</th>
                    <th scope="col">"Starts"</th>
                    <th scope="col">"Expires"</th>
                    <th scope="col">"State"</th>
                </tr>
            </thead>
            <tbody>
                {grants.into_iter().map(|g| {
                    let state = match &g.revoked_at {
                        Some(at) => view! { <span class="badge bad">"revoked"</span> " " {at.clone()} }.into_any(),
                        None => view! { <span class="badge ok">"active"</span> }.into_any(),
                    };
                    let key = g.id.clone();
                    view! {
                        <tr data-grant=key>
                            <td><code>{g.id}</code></td>
                            <td>{g.kind}</td>
                            <td>{g.amount}</td>
                            <td>{g.starts_at.unwrap_or_else(|| "at creation".to_owned())}</td>
                            <td>{g.expires_at.unwrap_or_else(|| "never".to_owned())}</td>
                            <td>{state}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

#[component]
fn Usage(tenant: String, usage: UsageView) -> impl IntoView {
    view! {
        <p>
            "Period " <strong>{usage.period}</strong> ": " {usage.requests_today} " of " {usage.daily_requests}
            " requests today, " {usage.leases} " of " {usage.concurrency} " reservations open, "
            {usage.available} " tokens available now."
        </p>
        <table class="grid" id=format!("usage-{tenant}")>
            <thead>
                <tr>
                    <th scope="col">"Bucket"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Tokens"</th>
                    <th scope="col">"Used"</th>
                    <th scope="col">"Reserved"</th>
                    <th scope="col">"Live"</th>
                </tr>
            </thead>
            <tbody>
                {usage.buckets.into_iter().map(|b| { let key = b.id.clone(); view! {
                    <tr data-bucket=key>
                        <td><code>{b.id}</code></td>
                        <td>{b.kind}</td>
                        <td>{b.amount}</td>
                        <td>{b.used}</td>
                        <td>{b.reserved}</td>
                        <td>{if b.live { "yes" } else { "no (not started or expired)" }}</td>
                    </tr>
                }}).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
