//! A pool's configuration history on its page: every recorded version, newest first, with
//! who made it and how, and for those who may edit a "Restore this version" button, which
//! makes a new version equal to it (or, where an approval policy applies, submits that as
//! a change request and says its number).

use leptos::prelude::*;

use super::changes::weights_text;
use super::pool_limits::{fields_of, submit_change, Change, EditTarget};
use crate::api::pools::pool_versions;
use crate::components::form::ReasonField;

/// The history section of a pool's page.
#[component]
pub fn PoolHistory(target: EditTarget, may_edit: bool) -> impl IntoView {
    let pool = target.pool.clone();
    let history = Resource::new(move || pool.clone(), pool_versions);
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let target = StoredValue::new(target);
    view! {
        {may_edit.then(|| view! { <ReasonField id="restore-reason" reason/> })}
        <p id="restore-message" class="notice" role="status" aria-live="polite">{move || message.get()}</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match history.await {
                    Ok(Some(h)) if h.versions.is_empty() => view! {
                        <p id="history-empty">"No earlier versions recorded yet: the history starts with the next change."</p>
                    }.into_any(),
                    Ok(Some(h)) => view! {
                        <table class="grid" id="pool-history">
                            <thead>
                                <tr>
                                    <th scope="col">"Version"</th>
                                    <th scope="col">"When"</th>
                                    <th scope="col">"By"</th>
                                    <th scope="col">"What"</th>
                                    <th scope="col">"Weights"</th>
                                    <th scope="col"><span class="visually-hidden">"Restore"</span></th>
                                </tr>
                            </thead>
                            <tbody>
                                {h.versions.into_iter().map(|v| {
                                    let n = v.version;
                                    let current = n == h.version;
                                    let restore = move |_| {
                                        let fields = Ok(fields_of("version", n.into()));
                                        submit_change(&target.get_value(), Change { method: "POST", what: "restore", refusal: None }, fields, reason, message, busy);
                                    };
                                    view! {
                                        <tr data-version=n>
                                            <td>{n} {current.then_some(" (current)")}</td>
                                            <td>{v.at.clone()}</td>
                                            <td>{v.actor.clone().unwrap_or_else(|| "—".into())}</td>
                                            <td>{v.action.clone().unwrap_or_else(|| "—".into())}</td>
                                            <td>{weights_text(&v.snapshot["weights"])}</td>
                                            <td>
                                                {(may_edit && !current).then(|| view! {
                                                    <button type="button" id=format!("restore-{n}")
                                                        disabled=move || !hydrated.get() || busy.get()
                                                        on:click=restore>"Restore this version"</button>
                                                })}
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Ok(None) => ().into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the history: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}
