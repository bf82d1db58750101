//! Ticket pools: the list, and one pool with its members' configured and effective weights
//! and health; pms and admins change its weights here.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::{get_pool, list_pools, MemberView, PoolDetail, PoolListing, SessionInfo};
use crate::components::layout::CurrentSession;

/// Every pool.
#[component]
pub fn Pools() -> impl IntoView {
    let pools = Resource::new(|| (), |_| list_pools());
    view! {
        <h1>"Pools"</h1>
        <section class="card">
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match pools.await {
                        Ok(pools) if pools.is_empty() => view! { <p>"No pools yet."</p> }.into_any(),
                        Ok(pools) => view! { <PoolTable pools/> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">"Could not load the pools: " {e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn PoolTable(pools: Vec<PoolListing>) -> impl IntoView {
    view! {
        <table class="grid" id="pools">
            <thead>
                <tr>
                    <th scope="col">"Pool"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Version"</th>
                    <th scope="col">"Published"</th>
                    <th scope="col">"Members"</th>
                    <th scope="col">"Out (ejected or disabled)"</th>
                </tr>
            </thead>
            <tbody>
                {pools.into_iter().map(|p| view! {
                    <tr>
                        <td><a href=format!("/pools/{}", p.name)>{p.name.clone()}</a></td>
                        <td>{p.kind}</td>
                        <td>{p.version}</td>
                        <td>{p.published_version}</td>
                        <td>{p.members}</td>
                        <td>{p.ejected}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// One pool.
#[component]
pub fn PoolPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.with(|p| p.get("name").unwrap_or_default());
    let pool = Resource::new(name, get_pool);
    let session = expect_context::<CurrentSession>().0;
    view! {
        <p><a href="/pools">"← All pools"</a></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                match pool.await {
                    Ok(Some(pool)) => view! { <PoolView pool session/> }.into_any(),
                    Ok(None) => view! { <h1>"Unknown pool"</h1><p>"There is no pool " <code>{name()}</code> "."</p> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the pool: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn PoolView(pool: PoolDetail, session: Option<SessionInfo>) -> impl IntoView {
    let may_edit = session.as_ref().is_some_and(|s| s.may_edit);
    let role = session.as_ref().map(|s| s.role.clone()).unwrap_or_default();
    let csrf = session.map(|s| s.csrf_token).unwrap_or_default();
    let editor = if may_edit {
        view! { <WeightsForm pool=pool.name.clone() version=pool.version weights=pool.weights.clone() csrf/> }.into_any()
    } else {
        view! { <p class="notice" id="weights-restricted">"Weights are changed by the pm and admin roles; you are signed in as " {role} "."</p> }.into_any()
    };
    view! {
        <h1>"Pool " <code>{pool.name.clone()}</code></h1>
        <p>"Kind " <strong id="pool-kind">{pool.kind.clone()}</strong> ", configuration version " <strong id="pool-version">{pool.version}</strong></p>
        <section class="card" aria-labelledby="members-heading">
            <h2 id="members-heading">"Members"</h2>
            <Members members=pool.members/>
        </section>
        <section class="card" aria-labelledby="weights-heading">
            <h2 id="weights-heading">{if pool.kind == "tiers" { "Tier weights" } else { "Weights" }}</h2>
            {editor}
        </section>
    }
}

#[component]
fn Members(members: Vec<MemberView>) -> impl IntoView {
    view! {
        <table class="grid" id="members">
            <thead>
                <tr>
                    <th scope="col">"Channel"</th>
                    <th scope="col">"Configured weight"</th>
                    <th scope="col">"Effective weight"</th>
                    <th scope="col">"Health"</th>
                </tr>
            </thead>
            <tbody>
                {members.into_iter().map(|m| {
                    let class = match m.state.as_str() {
                        "healthy" => "badge ok",
                        "ejected" => "badge bad",
                        _ => "badge warn",
                    };
                    let pin = m.pinned.map(|p| format!(" (pinned {p})"));
                    let key = m.channel.clone();
                    view! {
                        <tr data-channel=key>
                            <td><code>{m.channel}</code></td>
                            <td>{m.base_weight}</td>
                            <td>{m.effective_weight}</td>
                            <td><span class=class>{m.state}</span>{pin}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// Integer weights, a required reason, drain or immediate; posted to the REST API with the
/// session's CSRF token. A stale edit (409) names the pool's current version.
#[component]
fn WeightsForm(pool: String, version: i64, weights: Vec<crate::api::WeightEntry>, csrf: String) -> impl IntoView {
    let rows: Vec<(String, RwSignal<String>)> = weights.into_iter().map(|w| (w.member, RwSignal::new(w.weight.to_string()))).collect();
    let reason = RwSignal::new(String::new());
    let mode = RwSignal::new("drain".to_owned());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let fields = rows.clone();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let mut body = Vec::new();
        for (member, value) in &fields {
            match value.get_untracked().trim().parse::<u64>() {
                Ok(w) => body.push((member.clone(), w)),
                Err(_) => {
                    message.set(Some(format!("The weight of {member} must be a whole number ≥ 0.")));
                    return;
                }
            }
        }
        let why = reason.get_untracked().trim().to_owned();
        if why.is_empty() {
            message.set(Some("A reason is required: it goes into the audit trail.".into()));
            return;
        }
        busy.set(true);
        message.set(None);
        let (_pool, _csrf, _mode) = (pool.clone(), csrf.clone(), mode.get_untracked());
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            match save_weights(&_pool, &_csrf, body, &_mode, why, version).await {
                Ok(()) => {
                    let _ = window().location().reload();
                }
                Err(e) => {
                    message.set(Some(e));
                    busy.set(false);
                }
            }
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = (body, why);
    };
    view! {
        <form id="weights-form" on:submit=submit>
            <fieldset class="weights" disabled=move || !hydrated.get() || busy.get()>
                <legend>"Change weights (against version " {version} ")"</legend>
                {rows.into_iter().map(|(member, value)| {
                    let id = format!("weight-{member}");
                    view! {
                        <div class="field">
                            <label for=id.clone()>{member.clone()}</label>
                            <input id=id type="number" min="0" step="1" inputmode="numeric" required
                                prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
                        </div>
                    }
                }).collect_view()}
                <div class="field">
                    <label for="weights-mode">"When"</label>
                    <select id="weights-mode" on:change=move |ev| mode.set(event_target_value(&ev))>
                        <option value="drain" selected=true>"drain: from the next batch"</option>
                        <option value="immediate">"immediate: replace the remaining tickets now"</option>
                    </select>
                </div>
                <div class="field wide">
                    <label for="weights-reason">"Reason (required, for the audit trail)"</label>
                    <input id="weights-reason" type="text" maxlength="500" required
                        prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
                </div>
                <button type="submit" id="weights-submit">"Save weights"</button>
            </fieldset>
            <p id="weights-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
    }
}

/// Posts a weights change; `Err` holds the sentence to show.
#[cfg(feature = "hydrate")]
async fn save_weights(pool: &str, csrf: &str, weights: Vec<(String, u64)>, mode: &str, reason: String, version: i64) -> Result<(), String> {
    let weights: Vec<serde_json::Value> = weights.into_iter().map(|(m, w)| serde_json::json!({"member": m, "weight": w})).collect();
    let body = serde_json::json!({"weights": weights, "mode": mode, "reason": reason, "expected_version": version});
    let response = gloo_net::http::Request::post(&format!("/api/v1/pools/{pool}/weights"))
        .header("X-CSRF-Token", csrf)
        .json(&body)
        .map_err(|e| format!("could not send the change: {e}"))?
        .send()
        .await
        .map_err(|e| format!("the server did not answer: {e}"))?;
    if response.ok() {
        return Ok(());
    }
    let status = response.status();
    let reply: serde_json::Value = response.json().await.unwrap_or_default();
    if status == 409 {
        if let Some(current) = reply["current_version"].as_i64() {
            return Err(format!(
                "Not saved: the pool changed meanwhile. You edited version {version}; it is now at version {current}. Reload to see the current weights, then try again."
            ));
        }
    }
    let why = reply["error"].as_str().map(str::to_owned).unwrap_or_else(|| format!("the server answered {status}"));
    Err(format!("Not saved: {why}"))
}
