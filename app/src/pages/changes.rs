//! Change requests: every request with its pool, state, author, reason, approvals and the
//! weights it proposes; reviewers approve or reject a request in review (never their own:
//! the server refuses it, so the buttons are not offered), and an approved request is
//! applied here. Each action names the content hash the page shows, so an approval is of
//! what the reviewer saw.

use leptos::prelude::*;

use crate::api::changes::{list_changes, ChangeRequest};
use crate::components::layout::CurrentSession;

type ChangesResource = Resource<Result<Vec<ChangeRequest>, ServerFnError>>;

/// What every action on the page shares (read by the browser's writes only).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Page {
    csrf: StoredValue<String>,
    changes: ChangesResource,
    /// What was done last, or why not.
    said: RwSignal<Option<String>>,
}

/// The change requests, newest first.
#[component]
pub fn Changes() -> impl IntoView {
    let session = expect_context::<CurrentSession>().0;
    let changes: ChangesResource = Resource::new(|| (), |_| list_changes());
    let said = RwSignal::new(None::<String>);
    view! {
        <h1>"Change requests"</h1>
        <p id="changes-message" class="notice" role="status" aria-live="polite">{move || said.get()}</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let Some(s) = session.await.ok().flatten() else { return ().into_any() };
                let page = Page { csrf: StoredValue::new(s.csrf_token), changes, said };
                match changes.await {
                    Ok(list) if list.is_empty() => view! { <p id="changes-empty">"No change requests yet."</p> }.into_any(),
                    Ok(list) => view! { <ChangeTable list user=s.user page/> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the change requests: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

/// `A=50, B=30` from a weights list.
fn weights_text(weights: &serde_json::Value) -> String {
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
fn ChangeTable(list: Vec<ChangeRequest>, user: String, page: Page) -> impl IntoView {
    view! {
        <div class="card">
            <table class="grid" id="changes">
                <thead>
                    <tr>
                        <th scope="col">"#"</th>
                        <th scope="col">"Pool"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"By"</th>
                        <th scope="col">"Why"</th>
                        <th scope="col">"Weights now → proposed"</th>
                        <th scope="col">"Traffic moved"</th>
                        <th scope="col">"Approvals"</th>
                        <th scope="col">"Review"</th>
                    </tr>
                </thead>
                <tbody>
                    {list.into_iter().map(|c| view! { <ChangeRow change=c user=user.clone() page/> }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn ChangeRow(change: ChangeRequest, user: String, page: Page) -> impl IntoView {
    let id = change.id;
    let pool = change.entity.strip_prefix("pool:").unwrap_or(&change.entity).to_owned();
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
    let reviewable = change.state == "in_review" && change.author != user;
    let approved = change.state == "approved";
    let roles = change.approver_roles.join(" or ");
    view! {
        <tr data-change=id>
            <td>{id}</td>
            <td><a href=format!("/pools/{pool}")>{pool.clone()}</a></td>
            <td id=format!("change-state-{id}")>{change.state.clone()}</td>
            <td>{change.author.clone()}</td>
            <td>{change.reason.clone()}</td>
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
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        match crate::api::rest::send("POST", &path, &page.csrf.get_value(), &body).await {
            Ok(_) => {
                page.said.set(Some(said));
                busy.set(false);
                page.changes.refetch();
            }
            Err(refusal) => {
                page.said.set(Some(format!("Not done: {}", refusal.message())));
                busy.set(false);
            }
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (page, path, body, said, busy);
}
