//! The audit trail: who changed what, when, why, and how (before/after), with filters, paging
//! by cursor, and — for auditors and admins — the chain's verification and the CSV export.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::audit::{AuditEntry, Change};
use crate::api::{list_audit, verify_audit_chain, AuditQuery, ChainStatus};
use crate::components::form::Field;
use crate::components::layout::CurrentSession;
use crate::components::time::When;

/// The filters come from the query string (a plain GET form), so every view of the trail
/// has an address that can be shared and reloaded.
#[component]
pub fn Audit() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        params.with(|q| {
            let text = |k: &str| q.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
            AuditQuery {
                entity: text("entity"),
                actor: text("actor"),
                action: text("action"),
                from: text("from"),
                to: text("to"),
                before_id: text("before_id").and_then(|v| v.parse().ok()),
            }
        })
    });
    let page =
        Resource::new(move || query.get(), |q| list_audit(q.entity, q.actor, q.action, q.from, q.to, q.before_id));
    let session = expect_context::<CurrentSession>().0;
    // Asked only for those allowed to: others see why instead.
    let chain = Resource::new(
        || (),
        move |_| async move {
            match session.await {
                Ok(Some(s)) if s.may_export_audit => Some(verify_audit_chain().await),
                Ok(Some(s)) => Some(Err(ServerFnError::new(format!(
                    "Chain verification and CSV export are for the auditor and admin roles; you are signed in as {}.",
                    s.role
                )))),
                _ => None,
            }
        },
    );
    view! {
        <h1>"Audit"</h1>
        <Filters query=query.get_untracked()/>
        <section class="card" aria-labelledby="chain-heading">
            <h2 id="chain-heading">"Integrity"</h2>
            <Suspense fallback=|| view! { <p>"Verifying…"</p> }>
                {move || Suspend::new(async move {
                    match chain.await {
                        Some(Ok(status)) => view! { <Chain status/> }.into_any(),
                        Some(Err(e)) => view! {
                            <p class="notice" id="audit-restricted">{strip(e.to_string())}</p>
                        }.into_any(),
                        None => ().into_any(),
                    }
                })}
            </Suspense>
        </section>
        <section class="card" aria-labelledby="rows-heading">
            <h2 id="rows-heading">"Changes, newest first"</h2>
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    let may_export = matches!(session.await, Ok(Some(ref s)) if s.may_export_audit);
                    match page.await {
                        Ok(view) => {
                            let filters = view.filter_query.clone();
                            let export = may_export.then(|| {
                                let href = format!("/api/v1/audit.csv{}", with_query(&filters, None));
                                view! { <p><a id="csv-export" href=href download="audit.csv">"Export these rows as CSV"</a></p> }
                            });
                            let newer = query.get_untracked().before_id.map(|_| {
                                view! { <a id="newest" href=format!("/audit{}", with_query(&filters, None))>"Newest rows"</a> }
                            });
                            let older = view.next.map(|next| {
                                view! { <a id="older" href=format!("/audit{}", with_query(&filters, Some(next)))>"Older rows"</a> }
                            });
                            let empty = view.entries.is_empty();
                            view! {
                                {export}
                                {if empty {
                                    view! { <p id="audit-empty">"No audit rows match these filters."</p> }.into_any()
                                } else {
                                    view! { <Rows entries=view.entries/> }.into_any()
                                }}
                                <nav class="pager" aria-label="Pages">{newer}" "{older}</nav>
                            }.into_any()
                        }
                        Err(e) => view! {
                            <p class="error" role="alert" id="audit-error">"Could not load the audit trail: " {strip(e.to_string())}</p>
                        }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

/// `?filters[&before_id=n]`, or nothing.
fn with_query(filters: &str, before_id: Option<i64>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !filters.is_empty() {
        parts.push(filters.to_owned());
    }
    if let Some(id) = before_id {
        parts.push(format!("before_id={id}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A server function error's message without the "error running server function" prefix.
fn strip(message: String) -> String {
    match message.split_once(": ") {
        Some((head, rest)) if head.to_ascii_lowercase().contains("server") => rest.to_owned(),
        _ => message,
    }
}

#[component]
fn Filters(query: AuditQuery) -> impl IntoView {
    let field = |id: &'static str, label: &'static str, value: Option<String>, hint: &'static str| {
        view! {
            <Field id=format!("filter-{id}") label=label>
                <input id=format!("filter-{id}") name=id type="text" value=value.unwrap_or_default() placeholder=hint/>
            </Field>
        }
    };
    view! {
        <form class="card filters" method="get" action="/audit" aria-label="Filters">
            {field("entity", "Entity", query.entity, "e.g. pool:cn-pay")}
            {field("actor", "Actor", query.actor, "e.g. demo-pm")}
            {field("action", "Action", query.action, "e.g. pool.weights")}
            {field("from", "From (UTC)", query.from, "e.g. 2026-11-30T00:00")}
            {field("to", "To (UTC)", query.to, "e.g. 2026-12-01")}
            <div class="field actions">
                <button type="submit" id="apply-filters">"Apply"</button>
                <a href="/audit">"Clear"</a>
            </div>
        </form>
    }
}

#[component]
fn Chain(status: ChainStatus) -> impl IntoView {
    let signatures = if status.keyed {
        " Signatures checked with the audit key."
    } else {
        " Signatures not checked: the server has no audit key (TESSERA_AUDIT_KEY), so a rewrite with recomputed hashes would pass."
    };
    let view = if status.intact {
        // A quick check: rows before its checkpoint were checked by an earlier one.
        let checked = if status.checked_from > status.rows {
            format!(
                " {} rows, all checked by an earlier check; none written since (tessera audit verify --full checks all again).",
                status.rows
            )
        } else if status.checked_from > 1 {
            format!(
                " {} rows: rows {} to {} checked now, the rows before by an earlier check (tessera audit verify --full checks all).",
                status.rows, status.checked_from, status.rows
            )
        } else {
            format!(" {} rows checked: none edited or removed.", status.rows)
        };
        view! {
            <p id="chain-status"><span class="badge ok">"chain intact"</span>{checked} {signatures}</p>
        }
        .into_any()
    } else {
        let at = status.first_broken.map(|id| format!(" at row {id}")).unwrap_or_default();
        let why = status.problem.unwrap_or_default();
        view! {
            <p id="chain-status"><span class="badge bad">"chain broken"</span>" " {format!("{at} ({why}); {} rows checked.", status.rows)}</p>
        }
        .into_any()
    };
    view
}

#[component]
fn Rows(entries: Vec<AuditEntry>) -> impl IntoView {
    view! {
        <div class="table-scroll">
            <table class="grid" id="audit-rows">
                <thead>
                    <tr>
                        <th scope="col">"Time (UTC)"</th>
                        <th scope="col">"Actor"</th>
                        <th scope="col">"Source"</th>
                        <th scope="col">"Action"</th>
                        <th scope="col">"Entity"</th>
                        <th scope="col">"Reason"</th>
                        <th scope="col">"Before → after"</th>
                    </tr>
                </thead>
                <tbody>
                    {entries.into_iter().map(|e| view! {
                        <tr data-id=e.id>
                            <td class="nowrap"><When at=e.at/></td>
                            <td>{e.actor}</td>
                            <td>{e.source}</td>
                            <td><code>{e.action}</code></td>
                            // Every row of the same entity (a change request's submit, reviews and
                            // apply; a pool's versions) is one click away.
                            <td><a href=format!("/audit?entity={}", e.entity) title="Every row of this entity"><code>{e.entity.clone()}</code></a></td>
                            <td>{e.reason.unwrap_or_else(|| "—".to_owned())}</td>
                            <td><Diff changes=e.changes/></td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// What a row changed, as a table: one line per key (nested ones by path, list elements
/// by name), the kind in words, the value before and after.
#[component]
fn Diff(changes: Vec<Change>) -> impl IntoView {
    if changes.is_empty() {
        return view! { <span class="detail">"no change recorded"</span> }.into_any();
    }
    let cell = |v: Option<String>| v.map(|v| readable(&v)).unwrap_or_else(|| "–".to_owned());
    view! {
        <table class="diff">
            <thead>
                <tr><th scope="col">"Key"</th><th scope="col">"Change"</th><th scope="col">"Before"</th><th scope="col">"After"</th></tr>
            </thead>
            <tbody>
                {changes.into_iter().map(|c| view! {
                    <tr class=format!("diff-{}", c.kind.label()) data-key=c.key.clone()>
                        <th scope="row"><code>{c.key.clone()}</code></th>
                        <td class="diff-kind">{c.kind.label()}</td>
                        <td>{cell(c.before)}</td>
                        <td>{cell(c.after)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// A whole number of five digits or more with its thousands separated; anything else as it is.
fn readable(value: &str) -> String {
    match value.parse::<u64>() {
        Ok(n) if value.len() >= 5 && !value.starts_with('0') => crate::components::charts::grouped(n),
        _ => value.to_owned(),
    }
}
