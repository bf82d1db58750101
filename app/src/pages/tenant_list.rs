//! Tenants: a list searched, sorted and paged on the server (the query in the URL, so a
//! link can be shared), each row with the plan, the tokens a month, the live grants, the
//! use now and a state; each tenant links to its page (`tenants`).

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::tenants::{MAX_SEARCH, TENANT_SORTS};
use crate::api::{list_tenant_page, TenantList, TenantQuery};
use crate::components::charts::grouped;

/// The tenants list: search, sort and pages, all in the URL.
#[component]
pub fn Tenants() -> impl IntoView {
    let params = use_query_map();
    let query = move || {
        params.with(|p| TenantQuery {
            q: p.get("q").filter(|q| !q.is_empty()),
            sort: p.get("sort").filter(|s| !s.is_empty()),
            page: p.get("page").and_then(|n| n.parse().ok()),
        })
    };
    let list = Resource::new(query, |q| list_tenant_page(q.q, q.sort, q.page));
    view! {
        <h1>"Tenants"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let q = query();
                let form = view! { <TenantSearch q=q.q.clone().unwrap_or_default() sort=q.sort.clone().unwrap_or_else(|| "name".into())/> };
                match list.await {
                    Ok(page) => view! { {form} <TenantTable page/> }.into_any(),
                    Err(e) => view! { {form} <p class="error" role="alert">"Could not list the tenants: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

/// The search form: a plain GET of `/tenants`, so the URL holds the query.
#[component]
fn TenantSearch(q: String, sort: String) -> impl IntoView {
    view! {
        <form class="card filters" method="get" action="/tenants" role="search" aria-label="Search tenants">
            <label>"Name or plan contains "
                <input type="search" name="q" id="tenant-search" value=q maxlength=MAX_SEARCH.to_string()/>
            </label>
            <label>"Sort by "
                <select name="sort" id="tenant-sort">
                    {TENANT_SORTS.iter().map(|(value, label)| view! {
                        <option value=*value selected=*value == sort.as_str()>{*label}</option>
                    }).collect_view()}
                </select>
            </label>
            <button type="submit">"Search"</button>
            " " <a href="/tenants">"Clear"</a>
        </form>
    }
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
    let summary = format!(
        "{} tenant{}{}; page {} of {}",
        grouped(page.total),
        if page.total == 1 { "" } else { "s" },
        if page.q.is_empty() { String::new() } else { format!(" matching \"{}\"", page.q) },
        page.page,
        page.pages
    );
    let previous = (page.page > 1)
        .then(|| view! { <a id="tenants-previous" rel="prev" href=page.href(page.page - 1)>"Previous page"</a> });
    let next = (page.page < page.pages)
        .then(|| view! { <a id="tenants-next" rel="next" href=page.href(page.page + 1)>"Next page"</a> });
    let rows = page
        .rows
        .into_iter()
        .map(|t| {
            let (percent, state) = match &t.usage {
                Ok(u) => (format!("{:.1} %", u.percent()), u.state().to_owned()),
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
        <nav class="paging" aria-label="Pages">{previous} " " {next}</nav>
    }
    .into_any()
}
