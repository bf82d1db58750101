//! Change requests, filtered (state, author, what a request changes), sorted and paged on
//! the server with the query in the URL: each request with its pool, state, author,
//! reason, approvals and the weights it proposes; reviewers approve or reject a request in review (never their own:
//! the server refuses it, so the buttons are not offered), and an approved request is
//! applied here. Each action names the content hash the page shows, so an approval is of
//! what the reviewer saw. Below, the break-glass operations (made at once under a policy)
//! that an auditor other than who made them has yet to acknowledge.

use api::changes::ChangeState;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::changes::{
    list_break_glass, list_change_page, BreakGlass, ChangeList, ChangeQuery, ChangeRequest, CHANGE_SORTS,
};
use crate::api::lists::MAX_SEARCH;
use crate::components::layout::CurrentSession;
use crate::components::list::{neighbours, query_of, summary, Paging, SearchForm};
use crate::components::time::When;

type ChangesResource = Resource<Result<ChangeList, ServerFnError>>;

/// What every action on the page shares (read by the browser's writes only).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Page {
    csrf: StoredValue<String>,
    changes: ChangesResource,
    /// What was done last, or why not.
    said: RwSignal<Option<String>>,
}

/// The changes list's query a page's URL holds (an empty value as none): a list's query
/// and the state and author filters.
fn change_query(params: &leptos_router::params::ParamsMap) -> ChangeQuery {
    let part = |name: &str| params.get(name).filter(|v| !v.is_empty());
    let list = query_of(params);
    ChangeQuery { q: list.q, state: part("state"), author: part("author"), sort: list.sort, page: list.page }
}

/// The filters above the list: a GET of `/changes`, so that the URL holds them.
fn filters(query: &ChangeQuery) -> impl IntoView {
    let state = query.state.clone().unwrap_or_default();
    let author = query.author.clone().unwrap_or_default();
    view! {
        <SearchForm path="/changes" id="changes" label="What it changes contains" aria_label="Filter change requests"
            q=query.q.clone().unwrap_or_default() sort=query.sort.clone().unwrap_or_else(|| "newest".into()) sorts=&CHANGE_SORTS>
            <label>"State "
                <select name="state" id="changes-filter-state">
                    <option value="" selected=state.is_empty()>"any"</option>
                    {ChangeState::ALL.into_iter().map(ChangeState::as_str).map(|s| view! { <option value=s selected=s == state>{s}</option> }).collect_view()}
                </select>
            </label>
            <label>"Author "
                <input type="search" name="author" id="changes-filter-author" value=author maxlength=MAX_SEARCH.to_string()/>
            </label>
        </SearchForm>
    }
}

/// The change requests, newest first, a page at a time.
#[component]
pub fn Changes() -> impl IntoView {
    let session = expect_context::<CurrentSession>().0;
    let params = use_query_map();
    let query = move || params.with(change_query);
    let changes: ChangesResource = Resource::new(query, |q| list_change_page(q.q, q.state, q.author, q.sort, q.page));
    let flags: FlagsResource = Resource::new(|| (), |_| list_break_glass());
    let said = RwSignal::new(None::<String>);
    view! {
        <h1>"Change requests"</h1>
        <p id="changes-message" class="notice" role="status" aria-live="polite">{move || said.get()}</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let form = filters(&query());
                let Some(s) = session.await.ok().flatten() else { return ().into_any() };
                let page = Page { csrf: StoredValue::new(s.csrf_token), changes, said };
                match changes.await {
                    Ok(list) if list.list.total == 0 && list.list.q.is_empty() && list.state.is_empty() && list.author.is_empty() =>
                        view! { {form} <p id="changes-empty">"No change requests yet."</p> }.into_any(),
                    Ok(list) => view! { {form} <ChangeTable list user=s.user role=s.role page/> }.into_any(),
                    Err(e) => view! { {form} <p class="error" role="alert">"Could not load the change requests: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
        <h2>"Break-glass to acknowledge"</h2>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let Some(s) = session.await.ok().flatten() else { return ().into_any() };
                let page = Page { csrf: StoredValue::new(s.csrf_token.clone()), changes, said };
                match flags.await {
                    Ok(list) if list.is_empty() => view! { <p id="break-glass-empty">"Nothing to acknowledge."</p> }.into_any(),
                    Ok(list) => view! { <FlagTable list user=s.user may_acknowledge=s.may_export_audit page flags/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the break-glass flags: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

type FlagsResource = Resource<Result<Vec<BreakGlass>, ServerFnError>>;

/// Operations made at once on a pool under an approval policy, for an auditor (or admin)
/// other than who made them to acknowledge with a comment.
#[component]
fn FlagTable(
    list: Vec<BreakGlass>,
    user: String,
    may_acknowledge: bool,
    page: Page,
    flags: FlagsResource,
) -> impl IntoView {
    view! {
        <div class="card">
            <table class="grid" id="break-glass">
                <thead>
                    <tr>
                        <th scope="col">"#"</th>
                        <th scope="col">"When"</th>
                        <th scope="col">"Pool"</th>
                        <th scope="col">"What"</th>
                        <th scope="col">"By"</th>
                        <th scope="col">"Policy"</th>
                        <th scope="col">"Acknowledge"</th>
                    </tr>
                </thead>
                <tbody>
                    {list.into_iter().map(|f| {
                        let id = f.id;
                        let comment = RwSignal::new(String::new());
                        let busy = RwSignal::new(false);
                        let mine = f.actor == user;
                        let acknowledge = move |_| {
                            let text = comment.get_untracked();
                            if text.trim().is_empty() {
                                page.said.set(Some("Not done: say what you checked (a comment is required).".into()));
                                return;
                            }
                            busy.set(true);
                            let body = serde_json::json!({"comment": text.trim()});
                            run_then(page, format!("/api/v1/break-glass/{id}/acknowledge"), body,
                                format!("Break-glass #{id} acknowledged."), busy, move || flags.refetch());
                        };
                        view! {
                            <tr data-flag=id>
                                <td>{id}</td>
                                <td><When at=f.at.clone()/></td>
                                <td>{f.entity.strip_prefix("pool:").unwrap_or(&f.entity).to_owned()}</td>
                                <td>{f.action.clone()}</td>
                                <td>{f.actor.clone()}</td>
                                <td>{f.policy_scope.clone()}</td>
                                <td>
                                    {match (may_acknowledge, mine) {
                                        (true, false) => view! {
                                            <label for=format!("flag-comment-{id}")>"Comment"</label>
                                            <input id=format!("flag-comment-{id}") type="text" maxlength="500"
                                                prop:value=move || comment.get() on:input=move |ev| comment.set(event_target_value(&ev))/>
                                            <button type="button" id=format!("flag-ack-{id}") disabled=move || busy.get()
                                                on:click=acknowledge>"Acknowledge"</button>
                                        }.into_any(),
                                        (true, true) => view! { <span>"Yours: another auditor acknowledges it."</span> }.into_any(),
                                        (false, _) => view! { <span>"For an auditor."</span> }.into_any(),
                                    }}
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// A link to the page of what a request changes (a pool's, a channel's, a tenant's).
fn entity_link(entity: &str) -> impl IntoView {
    let (kind, name) = entity.split_once(':').unwrap_or(("", entity));
    let href = match kind {
        "pool" => format!("/pools/{name}"),
        "channel" => format!("/channels/{name}"),
        "tenant" => format!("/tenants/{name}"),
        _ => String::new(),
    };
    let text = if kind == "pool" { name.to_owned() } else { entity.to_owned() };
    if href.is_empty() {
        view! { <span>{text}</span> }.into_any()
    } else {
        view! { <a href=href>{text}</a> }.into_any()
    }
}

/// `A=50, B=30` from a weights list.
pub(crate) fn weights_text(weights: &serde_json::Value) -> String {
    weights
        .as_array()
        .map(|list| {
            list.iter()
                .map(|w| format!("{}={}", w["member"].as_str().unwrap_or("?"), w["weight"]))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

#[component]
fn ChangeTable(list: ChangeList, user: String, role: String, page: Page) -> impl IntoView {
    let l = &list.list;
    if l.total == 0 {
        return view! { <p id="changes-none">"No change request matches these filters."</p> }.into_any();
    }
    let summary = summary(l.total, "change request", &l.q, l.page, l.pages);
    let (previous, next) = neighbours(l.page, l.pages, |n| list.href(n));
    let rows = list.list.rows;
    view! {
        <p id="changes-summary" role="status">{summary}</p>
        <div class="card table-wrap">
            <table class="grid" id="changes">
                <thead>
                    <tr>
                        <th scope="col">"#"</th>
                        <th scope="col">"Pool"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"By"</th>
                        <th scope="col">"Why"</th>
                        <th scope="col">"What"</th>
                        <th scope="col">"Weights now → proposed"</th>
                        <th scope="col">"Traffic moved"</th>
                        <th scope="col">"Approvals"</th>
                        <th scope="col">"Review"</th>
                    </tr>
                </thead>
                <tbody>
                    {rows.into_iter().map(|c| view! { <ChangeRow change=c user=user.clone() role=role.clone() page/> }).collect_view()}
                </tbody>
            </table>
        </div>
        <Paging id="changes" previous next/>
    }
    .into_any()
}

#[component]
fn ChangeRow(change: ChangeRequest, user: String, role: String, page: Page) -> impl IntoView {
    let id = change.id;
    let comment = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let hash = StoredValue::new(change.content_hash.clone());
    let act = move |what: &'static str| {
        busy.set(true);
        let body = match what {
            "apply" => serde_json::Value::Null,
            _ => {
                let text = comment.get_untracked();
                let mut body = serde_json::json!({"content_hash": hash.get_value()});
                if !text.trim().is_empty() {
                    body["comment"] = text.trim().into();
                }
                body
            }
        };
        run(page, format!("/api/v1/changes/{id}/{what}"), body, format!("Change request #{id}: {what} done."), busy);
    };
    // The server decides (the pool's policy may have changed); the buttons are offered to
    // those the request names.
    let reviewable =
        change.state == ChangeState::InReview && change.author != user && change.approver_roles.contains(&role);
    let approved = change.state == ChangeState::Approved;
    let roles = change.approver_roles.join(" or ");
    view! {
        <tr data-change=id>
            <td>{id} " " <a href=format!("/audit?entity=change:{id}") id=format!("change-trail-{id}")>"trail"</a></td>
            <td>{entity_link(&change.entity)}</td>
            <td id=format!("change-state-{id}")>{change.state.as_str()}</td>
            <td>{change.author.clone()}</td>
            <td>{change.reason.clone()}</td>
            <td><ChangeDetail change=change.clone()/></td>
            <td>{weights_text(&change.diff["before"])} " → " {weights_text(&change.diff["after"])}</td>
            <td>{change.diff["moved_percent"].as_f64().map(|p| format!("{p} %"))}</td>
            <td id=format!("change-approvals-{id}")>
                {change.approvals} " of " {change.required_approvals} " (" {roles} ")"
            </td>
            <td>
                {reviewable.then(|| view! {
                    <label for=format!("change-comment-{id}")>"Comment"</label>
                    <input id=format!("change-comment-{id}") type="text" maxlength="500"
                        prop:value=move || comment.get() on:input=move |ev| comment.set(event_target_value(&ev))/>
                    <button type="button" id=format!("change-approve-{id}") disabled=move || busy.get()
                        on:click=move |_| act("approve")>"Approve"</button>
                    <button type="button" id=format!("change-reject-{id}") disabled=move || busy.get()
                        on:click=move |_| act("reject")>"Reject"</button>
                })}
                {approved.then(|| view! {
                    <button type="button" id=format!("change-apply-{id}") disabled=move || busy.get()
                        on:click=move |_| act("apply")>"Apply"</button>
                })}
            </td>
        </tr>
    }
}

/// Sends one action; once done, says so and reads the list again; otherwise says why not.
fn run(page: Page, path: String, body: serde_json::Value, said: String, busy: RwSignal<bool>) {
    run_then(page, path, body, said, busy, move || page.changes.refetch());
}

/// Sends one action; once done, says so and calls `then`; otherwise says why not.
fn run_then(
    page: Page,
    path: String,
    body: serde_json::Value,
    said: String,
    busy: RwSignal<bool>,
    then: impl Fn() + 'static,
) {
    crate::api::rest::write(
        "POST",
        path,
        page.csrf.get_value(),
        body,
        busy,
        move |_| {
            page.said.set(Some(said));
            then();
        },
        move |refusal| page.said.set(Some(format!("Not done: {}", refusal.message()))),
    );
}

/// What a request changes, as its reviewers see it: its kind, each configuration field
/// before and after, the engine's preview of both weights, and what a restore undoes.
#[component]
fn ChangeDetail(change: ChangeRequest) -> impl IntoView {
    let id = change.id;
    let kind = change.operation["kind"].as_str().unwrap_or("?").to_owned();
    let compact = |v: &serde_json::Value| if v.is_null() { "—".to_owned() } else { v.to_string() };
    let fields: Vec<(String, String, String)> = change.diff["changes"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|c| (c["field"].as_str().unwrap_or("?").to_owned(), compact(&c["before"]), compact(&c["after"])))
                .collect()
        })
        .unwrap_or_default();
    let (before, after) = (&change.diff["preview"]["before"], &change.diff["preview"]["after"]);
    let share = |p: &serde_json::Value, member: &str| -> String {
        p["members"]
            .as_array()
            .and_then(|m| m.iter().find(|x| x["member"] == member))
            .map(|x| {
                format!(
                    "{:.2} % ({}–{} per batch)",
                    x["share"].as_f64().unwrap_or(0.0) * 100.0,
                    x["batch_min"],
                    x["batch_max"]
                )
            })
            .unwrap_or_else(|| "—".to_owned())
    };
    let mut members: Vec<String> = Vec::new();
    for p in [before, after] {
        for m in p["members"].as_array().into_iter().flatten() {
            let name = m["member"].as_str().unwrap_or("?").to_owned();
            if !members.contains(&name) {
                members.push(name);
            }
        }
    }
    let rows: Vec<(String, String, String)> =
        members.into_iter().map(|m| (share(before, &m), share(after, &m), m)).collect();
    let spread = |p: &serde_json::Value| -> String {
        let s = &p["spread"];
        if s.is_null() {
            return "—".to_owned();
        }
        format!(
            "longest run {} ({}), window deviation {:.2}",
            s["longest_run"],
            s["longest_run_member"].as_str().unwrap_or("?"),
            s["max_window_dev"].as_f64().unwrap_or(0.0)
        )
    };
    let (spread_before, spread_after) = (spread(before), spread(after));
    let undoes: Vec<String> = change.diff["undoes"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|v| {
                    format!(
                        "version {} ({} by {})",
                        v["version"],
                        v["action"].as_str().unwrap_or("?"),
                        v["actor"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    view! {
        <details id=format!("change-detail-{id}")>
            <summary>{kind}</summary>
            <table class="grid">
                <caption>"Configuration"</caption>
                <thead><tr><th scope="col">"Field"</th><th scope="col">"Now"</th><th scope="col">"Proposed"</th></tr></thead>
                <tbody>
                    {fields.into_iter().map(|(f, b, a)| view! {
                        <tr><td>{f}</td><td><code>{b}</code></td><td><code>{a}</code></td></tr>
                    }).collect_view()}
                </tbody>
            </table>
            <table class="grid">
                <caption>"Preview (shares, tickets per batch)"</caption>
                <thead><tr><th scope="col">"Member"</th><th scope="col">"Now"</th><th scope="col">"Proposed"</th></tr></thead>
                <tbody>
                    {rows.into_iter().map(|(b, a, m)| view! {
                        <tr><td>{m}</td><td>{b}</td><td>{a}</td></tr>
                    }).collect_view()}
                    <tr><td>"Ordering"</td><td>{spread_before}</td><td>{spread_after}</td></tr>
                </tbody>
            </table>
            {(!undoes.is_empty()).then(|| view! { <p>"Undoes: " {undoes.join("; ")}</p> })}
        </details>
    }
}
