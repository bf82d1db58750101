//! Routes: the list, and one route's rules with the rule tester (type a request's
//! attributes, see the rule and pool chosen: the engine's own evaluation, run in the
//! browser) and, for pm and admin, the editor (the route as JSON, checked by the engine as
//! it is typed; the tester decides with the edit too, before it is saved).

use std::sync::Arc;

use std::collections::BTreeMap;

use engine::route::{Attributes, Loose, Route};
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::routes::{get_route, list_routes, RouteSummary, RouteView};
use crate::api::SessionInfo;
use crate::components::detail::{DetailPage, ShowFound};
use crate::components::form::{required_reason, Field, ReasonField};
use crate::components::layout::CurrentSession;

/// Every route, and (pm, admin) a form to create one.
#[component]
pub fn RouteList() -> impl IntoView {
    let routes = Resource::new(|| (), |_| list_routes());
    let session = expect_context::<CurrentSession>().0;
    view! {
        <h1>"Routes"</h1>
        <p class="notice">"A route's rules choose the pool a request draws from, by the request's attributes (amount, currency, method, country, merchant, …): the first rule whose conditions all hold wins, otherwise the default pool. Applications draw with "
            <code>"POST /api/v1/routes/{route}/draw"</code>"."</p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                let create = session.filter(|s| s.may_edit).map(|s| view! { <CreateRoute csrf=s.csrf_token/> });
                match routes.await {
                    Ok(list) if list.is_empty() => view! { <p id="routes-none">"No routes yet."</p> {create} }.into_any(),
                    Ok(list) => view! { <RouteTable list/> {create} }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the routes: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn RouteTable(list: Vec<RouteSummary>) -> impl IntoView {
    view! {
        <section class="card table-wrap">
            <table class="grid" id="routes">
                <thead>
                    <tr>
                        <th scope="col">"Route"</th>
                        <th scope="col" class="number">"Version"</th>
                        <th scope="col" class="number">"Rules"</th>
                        <th scope="col">"Default pool"</th>
                        <th scope="col">"Pools"</th>
                    </tr>
                </thead>
                <tbody>
                    {list.into_iter().map(|r| view! {
                        <tr data-route=r.name.clone()>
                            <th scope="row"><a href=format!("/routes/{}", r.name)>{r.name.clone()}</a></th>
                            <td class="number">{r.version}</td>
                            <td class="number">{r.rules}</td>
                            <td><code>{r.default_pool}</code></td>
                            <td>{r.pools.join(", ")}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// A new route: its name and default pool (rules are added on its page).
#[component]
fn CreateRoute(csrf: String) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let pool = RwSignal::new(String::new());
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let route = name.get_untracked().trim().to_owned();
        let body = serde_json::json!({"rules": [], "default_pool": pool.get_untracked().trim()});
        match (route.is_empty(), required_reason(reason)) {
            (true, _) => message.set(Some("Not created: the route needs a name.".into())),
            (_, Err(e)) => message.set(Some(e)),
            (false, Ok(why)) => save(csrf.clone(), route, body, why, 0, message, true),
        }
    };
    view! {
        <section class="card" aria-labelledby="new-route-heading">
            <h2 id="new-route-heading">"New route"</h2>
            <form id="route-create" on:submit=submit>
                <fieldset disabled=move || !hydrated.get()>
                    <Field id="route-name" label="Name (1..=64 of A-Z a-z 0-9 _ -)">
                        <input id="route-name" type="text" maxlength="64" required
                            prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                    </Field>
                    <Field id="route-default" label="Default pool (an existing pool)">
                        <input id="route-default" type="text" maxlength="64" required
                            prop:value=move || pool.get() on:input=move |ev| pool.set(event_target_value(&ev))/>
                    </Field>
                    <ReasonField id="route-create-reason" reason/>
                    <button type="submit" id="route-create-submit">"Create route"</button>
                </fieldset>
                <p id="route-create-message" class="error" role="alert">{move || message.get()}</p>
            </form>
        </section>
    }
}

/// One route.
#[component]
pub fn RoutePage() -> impl IntoView {
    let params = use_params_map();
    let name = Signal::derive(move || params.with(|p| p.get("name").unwrap_or_default()));
    let found = Resource::new(move || name.get(), get_route);
    let show: ShowFound<RouteView> = Arc::new(|view, session| view! { <RouteView view session/> }.into_any());
    view! { <DetailPage list="/routes" plural="routes" kind="route" name found show/> }
}

/// A route's JSON as typed, parsed by the engine: the route, or the field and rule broken.
fn parse_draft(text: &str) -> Result<Route, String> {
    let loose: Loose = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Route::parse(&loose).map_err(|e| e.to_string())
}

/// The tester's attributes, one `name = value` a line (blank lines skipped).
fn parse_attributes(text: &str) -> Result<Attributes, String> {
    let mut map = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(format!("line {}: write name = value", i + 1));
        };
        map.insert(name.trim().to_owned(), Loose::Text(value.trim().to_owned()));
    }
    Attributes::parse(&Loose::Map(map)).map_err(|e| e.to_string())
}

/// What `route` decides for `attributes`, in words.
fn decided(route: &Route, attributes: &Attributes) -> String {
    let d = route.decide(attributes);
    match d.rule {
        Some((i, name)) => format!("rule {} ({name}) matches → pool {}", i + 1, d.pool),
        None => format!("no rule matches → default pool {}", d.pool),
    }
}

#[component]
fn RouteView(view: RouteView, session: Option<SessionInfo>) -> impl IntoView {
    let detail = view.detail;
    let saved = serde_json::from_value::<Loose>(detail.route.clone()).ok().and_then(|l| Route::parse(&l).ok());
    let pretty = serde_json::to_string_pretty(&detail.route).unwrap_or_default();
    let may_edit = session.as_ref().is_some_and(|s| s.may_edit);
    let csrf = session.map(|s| s.csrf_token).unwrap_or_default();
    let draft = RwSignal::new(pretty.clone());
    let checked = Memo::new(move |_| parse_draft(&draft.get()));
    let attributes = RwSignal::new("amount = 1000\ncurrency = USD\ncountry = SG\nmethod = card".to_owned());
    let saved_route = StoredValue::new(saved.clone());
    let tested = move || -> Result<(String, Option<String>), String> {
        let attrs = parse_attributes(&attributes.get())?;
        let now = saved_route
            .with_value(|r| r.as_ref().map(|r| decided(r, &attrs)))
            .unwrap_or_else(|| "the saved route does not parse".into());
        let edited = checked.with(|c| {
            c.as_ref().ok().filter(|r| Some(*r) != saved_route.get_value().as_ref()).map(|r| decided(r, &attrs))
        });
        Ok((now, edited))
    };
    let rules = saved.as_ref().map(|r| {
        r.rules()
            .iter()
            .enumerate()
            .map(|(i, rule)| (i + 1, rule.name().to_owned(), rule.describe(), rule.pool().to_owned()))
            .collect::<Vec<_>>()
    });
    let default_pool = saved.as_ref().map(|r| r.default_pool().to_owned()).unwrap_or_default();
    let name = detail.name.clone();
    let editor = may_edit.then(|| {
        view! { <RouteEditor name=name.clone() version=detail.version csrf=csrf.clone() draft checked pools=view.pools.clone() policy=view.policy.clone()/> }
    });
    view! {
        <h1>"Route " <code>{detail.name.clone()}</code></h1>
        <p>"Version " <strong id="route-version">{detail.version}</strong> ", changed " {detail.updated_at.clone()}</p>
        <section class="card" aria-labelledby="rules-heading">
            <h2 id="rules-heading">"Rules (tried in order)"</h2>
            <table class="grid" id="route-rules">
                <thead><tr><th scope="col">"#"</th><th scope="col">"Rule"</th><th scope="col">"When"</th><th scope="col">"Pool"</th></tr></thead>
                <tbody>
                    {rules.unwrap_or_default().into_iter().map(|(n, rule, when, pool)| { let key = rule.clone(); view! {
                        <tr data-rule=key><td>{n}</td><td><code>{rule}</code></td><td>{when}</td><td><a href=format!("/pools/{pool}")>{pool.clone()}</a></td></tr>
                    }}).collect_view()}
                    <tr data-rule="default"><td></td><td>"otherwise"</td><td>"no rule matched"</td><td><a href=format!("/pools/{default_pool}")>{default_pool.clone()}</a></td></tr>
                </tbody>
            </table>
        </section>
        <section class="card" aria-labelledby="tester-heading">
            <h2 id="tester-heading">"Rule tester"</h2>
            <Field id="route-test-attributes" label="A request's attributes, one name = value a line" wide=true>
                <textarea id="route-test-attributes" rows="6" cols="40"
                    prop:value=move || attributes.get() on:input=move |ev| attributes.set(event_target_value(&ev))></textarea>
            </Field>
            <p id="route-test-result" role="status">
                {move || match tested() {
                    Ok((now, _)) => format!("Saved route: {now}"),
                    Err(e) => format!("Not a valid request: {e}"),
                }}
            </p>
            <p id="route-test-draft">{move || tested().ok().and_then(|(_, edited)| edited).map(|d| format!("With your edits: {d}"))}</p>
        </section>
        {editor}
    }
}

/// The editor: the route as JSON, checked as typed; saved with a reason (a change request
/// where the `routes` approval policy applies).
#[component]
fn RouteEditor(
    name: String,
    version: i64,
    csrf: String,
    draft: RwSignal<String>,
    checked: Memo<Result<Route, String>>,
    pools: Vec<String>,
    policy: Option<String>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let unknown_pool = move || {
        checked.with(|c| {
            c.as_ref()
                .ok()
                .and_then(|r| r.pools().into_iter().find(|p| !pools.iter().any(|k| k == p)).map(str::to_owned))
        })
    };
    let error = Signal::derive(move || match checked.get() {
        Err(e) => Some(e),
        Ok(_) => unknown_pool().map(|p| format!("there is no pool {p:?}")),
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let route = match checked.get_untracked() {
            Ok(route) => route,
            Err(e) => return message.set(Some(format!("Not saved: {e}"))),
        };
        match required_reason(reason) {
            Ok(why) => {
                let body = serde_json::to_value(&route).unwrap_or_default();
                save(csrf.clone(), name.clone(), body, why, version, message, false)
            }
            Err(e) => message.set(Some(e)),
        }
    };
    view! {
        <section class="card" aria-labelledby="editor-heading">
            <h2 id="editor-heading">"Edit the rules"</h2>
            {policy.map(|scope| view! { <p class="notice" id="route-policy">"The approval policy " <code>{scope}</code> " applies: saving submits a change request."</p> })}
            <p>"Each rule: " <code>{r#"{"name": "large-usd", "when": {"amount": {"gte": "1000"}, "currency": {"in": ["USD", "EUR"]}}, "pool": "acq-large"}"#}</code>
               ". Conditions: a range on amounts (gte, gt, lte, lt) or one of equals, in, prefix."</p>
            <form id="route-form" on:submit=submit>
                <fieldset disabled=move || !hydrated.get()>
                    <Field id="route-json" label="The route (JSON)" error=error wide=true>
                        <textarea id="route-json" rows="18" cols="80" spellcheck="false" aria-describedby="route-json-error"
                            prop:value=move || draft.get() on:input=move |ev| draft.set(event_target_value(&ev))></textarea>
                    </Field>
                    <ReasonField id="route-reason" reason/>
                    <button type="submit" id="route-submit">"Save the route"</button>
                </fieldset>
                <p id="route-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
            </form>
        </section>
    }
}

/// Sends a route (`{"rules", "default_pool"}`) made against `version`: the page goes to the
/// route when it is saved; where an approval policy applies it is submitted as a change
/// request instead, and `message` says its number; otherwise `message` says why not.
fn save(
    csrf: String,
    name: String,
    route: serde_json::Value,
    reason: String,
    version: i64,
    message: RwSignal<Option<String>>,
    created: bool,
) {
    message.set(None);
    let _ = (&csrf, &name, &route, &reason, version, created);
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        let mut body = route.clone();
        body["reason"] = reason.clone().into();
        body["expected_version"] = version.into();
        let url = format!("/api/v1/routes/{name}");
        match crate::api::rest::send("PUT", &url, &csrf, &body).await {
            Ok(_) if created => {
                let _ = window().location().set_href(&format!("/routes/{name}"));
            }
            Ok(_) => {
                let _ = window().location().reload();
            }
            Err(refusal) if refusal.field.as_deref() == Some("policy") => {
                let mut operation = route.clone();
                operation["kind"] = "route.put".into();
                let proposal = serde_json::json!({
                    "entity": format!("route:{name}"),
                    "operation": operation,
                    "reason": reason,
                    "expected_version": version,
                });
                let text = match crate::api::rest::send("POST", "/api/v1/changes", &csrf, &proposal).await {
                    Ok(request) => format!(
                        "An approval policy applies to routes: submitted for review as change request #{} (see Changes).",
                        request["id"]
                    ),
                    Err(again) => format!("Not saved: {}", again.message()),
                };
                message.set(Some(text));
            }
            Err(refusal) => message.set(Some(match refusal.conflict_version() {
                Some(now) => format!("Not saved: the route changed meanwhile (you edited version {version}; it is now at {now}). Reload, then try again."),
                None => format!("Not saved: {}", refusal.message()),
            })),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tester_reads_name_value_lines_and_names_a_bad_one() {
        let attrs = parse_attributes("amount = 1000\n\ncurrency= usd").unwrap();
        assert_eq!(attrs.len(), 2);
        assert!(parse_attributes("amount 1000").unwrap_err().contains("line 1"));
        assert!(parse_attributes("currency = dollars").unwrap_err().contains("attributes.currency"));
        let route = parse_draft(
            r#"{"rules": [{"name": "big", "when": {"amount": {"gte": 1000}}, "pool": "p"}], "default_pool": "d"}"#,
        )
        .unwrap();
        assert_eq!(decided(&route, &attrs), "rule 1 (big) matches → pool p");
        assert!(parse_draft("{").unwrap_err().starts_with("not JSON"));
        assert!(parse_draft(r#"{"rules": [{"when": {}, "pool": "p"}]}"#).unwrap_err().contains("default_pool"));
    }
}
