//! Tenants: a list searched, sorted and paged on the server (the query in the URL, so a
//! link can be shared), each row with the plan, the tokens a month, the live grants, the
//! use now and a state; each tenant links to its page (`tenants`).

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::tenants::TENANT_SORTS;
use crate::api::{list_tenant_page, TenantList};
use crate::components::charts::grouped;
use crate::components::list::{neighbours, query_of, summary, Paging, SearchForm};
use crate::components::number::points;

/// The tenants list: search, sort and pages, all in the URL.
#[component]
pub fn Tenants() -> impl IntoView {
    let params = use_query_map();
    let query = move || params.with(query_of);
    let list = Resource::new(query, |q| list_tenant_page(q.q, q.sort, q.page));
    view! {
        <h1>"Tenants"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let q = query();
                let form = view! {
                    <SearchForm path="/tenants" id="tenant" label="Name or plan contains" aria_label="Search tenants"
                        q=q.q.clone().unwrap_or_default() sort=q.sort.clone().unwrap_or_else(|| "name".into()) sorts=&TENANT_SORTS/>
                };
                match list.await {
                    Ok(page) => view! { {form} <TenantTable page/> }.into_any(),
                    Err(e) => view! { {form} <p class="error" role="alert">"Could not list the tenants: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

/// One page of tenants with links to the others.
#[component]
fn TenantTable(page: TenantList) -> impl IntoView {
    if page.total == 0 {
        let text = if page.q.is_empty() {
            "No tenants yet.".to_owned()
        } else {
            format!("No tenant's name or plan contains \"{}\".", page.q)
        };
        return view! { <p id="tenants-none">{text}</p> }.into_any();
    }
    let summary = summary(page.total, "tenant", &page.q, page.page, page.pages);
    let (previous, next) = neighbours(page.page, page.pages, |n| page.href("/tenants", "name", n));
    let rows = page
        .rows
        .into_iter()
        .map(|t| {
            let (percent, state) = match &t.usage {
                Ok(u) => (points(u.percent(), 1), u.state().to_owned()),
                Err(why) => ("—".to_owned(), why.clone()),
            };
            view! {
                <tr data-tenant=t.name.clone()>
                    <th scope="row"><a href=format!("/tenants/{}", t.name)><code>{t.name.clone()}</code></a></th>
                    <td>{t.plan}</td>
                    <td class="number">{grouped(t.monthly_tokens.max(0) as u64)}</td>
                    <td class="number">{t.live_grants}</td>
                    <td class="number">{percent}</td>
                    <td>{state}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <p id="tenants-summary" role="status">{summary}</p>
        <div class="table-wrap">
            <table class="grid" id="tenants">
                <thead>
                    <tr>
                        <th scope="col">"Tenant"</th>
                        <th scope="col">"Plan"</th>
                        <th scope="col">"Tokens a month"</th>
                        <th scope="col">"Live grants"</th>
                        <th scope="col">"Use (used + reserved)"</th>
                        <th scope="col">"State"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        <Paging id="tenants" previous next/>
    }
    .into_any()
}
