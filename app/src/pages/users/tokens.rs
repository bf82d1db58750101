//! API tokens on the users page: every token with its scope, owner, use and what a
//! data-plane token serves (its tenants, pools, routes and channels, or any); admins add
//! tokens with their bindings, change the bindings of a live data-plane token, and revoke.

use leptos::prelude::*;

use super::{run, Page, Revealed};
use crate::api::rest::Refusal;
use crate::api::TokenView;
use crate::components::form::Field;
use crate::components::time::When;

/// The four kinds a data-plane token is bound to: the body's field and what the page says.
const KINDS: [(&str, &str); 4] = [
    ("tenants", "Tenants (reserve, settle, release)"),
    ("pools", "Pools (draw)"),
    ("routes", "Routes (draw)"),
    ("channels", "Channels (outcome reports)"),
];

/// One list as the page writes it: `any` for `["*"]`, `none` for an empty list, else the names.
fn shown(names: &[String]) -> String {
    match names {
        [only] if only == "*" => "any".to_owned(),
        [] => "none".to_owned(),
        names => names.join(", "),
    }
}

/// One list as typed: names separated by commas or spaces; `*` (or `any`) for any.
fn typed(raw: &str) -> Vec<String> {
    raw.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|n| !n.is_empty())
        .map(|n| if n.eq_ignore_ascii_case("any") { "*".to_owned() } else { n.to_owned() })
        .collect()
}

/// A list as the form shows it before an edit.
fn editable(names: &[String]) -> String {
    names.join(", ")
}

/// The lists of a token, by kind.
fn lists(b: &api::access::TokenBindings) -> [&Vec<String>; 4] {
    [&b.tenants, &b.pools, &b.routes, &b.channels]
}

#[component]
pub(super) fn TokenTable(tokens: Vec<TokenView>, page: Page) -> impl IntoView {
    if tokens.is_empty() {
        return view! { <p id="tokens-none">"No API tokens yet."</p> }.into_any();
    }
    let editing = RwSignal::new(None::<TokenView>);
    view! {
        <p class="help" id="tokens-bindings-help">
            "A data-plane token serves only what it is bound to: the tenants it may reserve for, the pools and routes it may "
            "draw from, the channels it may report outcomes for. " <strong>"any"</strong>
            " means every one, also those created later; tokens made before bindings existed serve any in all four until an admin binds them."
        </p>
        <table class="grid" id="tokens">
            <thead>
                <tr>
                    <th scope="col">"Id"</th>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Starts with"</th>
                    <th scope="col">"Scope"</th>
                    <th scope="col">"Serves"</th>
                    <th scope="col">"Owner (created by)"</th>
                    <th scope="col">"Created"</th>
                    <th scope="col">"Last used"</th>
                    <th scope="col">"State"</th>
                </tr>
            </thead>
            <tbody>
                {tokens.into_iter().map(|t| {
                    let live = t.revoked_at.is_none();
                    let dataplane = t.scope == "dataplane";
                    let state = match &t.revoked_at {
                        Some(at) => view! { <span class="badge bad">"revoked"</span> " " <When at=at.clone()/> }.into_any(),
                        None => view! { <span class="badge ok">"live"</span> " " <RevokeToken token=t.id name=t.name.clone() page/> }.into_any(),
                    };
                    let serves = if dataplane {
                        let everything = lists(&t.bindings).iter().all(|l| l.len() == 1 && l[0] == "*");
                        let edit = live.then(|| {
                            let token = t.clone();
                            view! {
                                <button type="button" id=format!("bind-token-{}", t.id) aria-label=format!("Edit what token {} ({}) serves", t.id, t.name)
                                    on:click=move |_| editing.set(Some(token.clone()))>"Edit bindings"</button>
                            }
                        });
                        view! {
                            <dl class="bindings" id=format!("token-bindings-{}", t.id)>
                                {KINDS.iter().zip(lists(&t.bindings)).map(|((field, _), names)| view! {
                                    <dt>{*field}</dt><dd data-kind=*field>{shown(names)}</dd>
                                }).collect_view()}
                            </dl>
                            {everything.then(|| view! { <span class="badge warn">"unbound: serves any"</span> " " })}
                            {edit}
                        }.into_any()
                    } else if t.scope == "metrics" {
                        "/metrics and readiness details".into_any()
                    } else {
                        "the admin API (no data plane)".into_any()
                    };
                    view! {
                        <tr data-token=t.id.to_string()>
                            <td>{t.id}</td>
                            <td>{t.name}</td>
                            <td><code>{t.prefix} "…"</code></td>
                            <td>{t.scope}</td>
                            <td>{serves}</td>
                            <td>{t.created_by}</td>
                            <td><When at=t.created_at/></td>
                            <td>{match t.last_used_at { Some(at) => view! { <When at/> }.into_any(), None => "never".into_any() }}</td>
                            <td id=format!("token-state-{}", t.id)>{state}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        {move || editing.get().map(|t| view! { <BindingsForm token=t page editing/> })}
    }
    .into_any()
}

/// Changes what one live data-plane token serves.
#[component]
fn BindingsForm(token: TokenView, page: Page, editing: RwSignal<Option<TokenView>>) -> impl IntoView {
    let id = token.id;
    let values: [RwSignal<String>; 4] = lists(&token.bindings).map(|l| RwSignal::new(editable(l)));
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        busy.set(true);
        error.set(None);
        let mut body = serde_json::Map::new();
        for ((field, _), value) in KINDS.iter().zip(values) {
            body.insert((*field).to_owned(), serde_json::json!(typed(&value.get_untracked())));
        }
        let said = format!("Token {id} now serves what its bindings name.");
        editing.set(None);
        run(
            page,
            "PUT",
            format!("/api/v1/tokens/{id}/bindings"),
            serde_json::Value::Object(body),
            said,
            error,
            busy,
            |_| None,
        );
    };
    let field_error = move |field: &'static str| Signal::derive(move || error.get().and_then(|r| r.about(field)));
    view! {
        <form id="bind-token-form" class="card" on:submit=submit>
            <fieldset disabled=move || busy.get()>
                <legend>{format!("What token {id} ({}) serves", token.name)}</legend>
                <p class="help">"Names separated by commas; * (or any) for every one; empty for none."</p>
                {KINDS.iter().zip(values).map(|((field, label), value)| {
                    let input_id = format!("bind-token-{field}");
                    view! {
                        <Field id=input_id.clone() label=*label error=field_error(field)>
                            <input id=input_id type="text" autocomplete="off" placeholder="e.g. acme, globex"
                                prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
                        </Field>
                    }
                }).collect_view()}
                <button type="submit" id="bind-token-submit">"Save bindings"</button>
                <button type="button" id="bind-token-cancel" on:click=move |_| editing.set(None)>"Cancel"</button>
            </fieldset>
            <p class="field-error" id="bind-token-message" role="alert">
                {move || error.get().filter(|r| !KINDS.iter().any(|(f, _)| r.about(f).is_some())).map(|r| r.text)}
            </p>
        </form>
    }
}

/// Revokes one token: it stops working at once.
#[component]
fn RevokeToken(token: i64, name: String, page: Page) -> impl IntoView {
    let id = token;
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let revoke = move |_| {
        busy.set(true);
        error.set(None);
        let said = format!("Token {id} revoked: it is refused from now on.");
        run(page, "POST", format!("/api/v1/tokens/{id}/revoke"), serde_json::Value::Null, said, error, busy, |_| None);
    };
    view! {
        <button type="button" class="danger" id=format!("revoke-token-{id}") aria-label=format!("Revoke token {id} ({name})")
            disabled=move || !hydrated.get() || busy.get() on:click=revoke>"Revoke"</button>
        <span class="field-error" id=format!("revoke-token-message-{id}") role="alert">{move || error.get().map(|r| r.text)}</span>
    }
    .into_any()
}

/// A new API token: a name, a scope and, for the data plane, what it serves; its secret is
/// shown once.
#[component]
pub(super) fn NewTokenForm(page: Page) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let scope = RwSignal::new("dataplane".to_owned());
    let values: [RwSignal<String>; 4] = std::array::from_fn(|_| RwSignal::new(String::new()));
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (n, s) = (name.get_untracked().trim().to_owned(), scope.get_untracked());
        if let Err(refusal) = check_token_name(&n) {
            error.set(Some(refusal));
            return;
        }
        let mut body = serde_json::Map::new();
        body.insert("name".into(), serde_json::json!(n));
        body.insert("scope".into(), serde_json::json!(s));
        if s == "dataplane" {
            for ((field, _), value) in KINDS.iter().zip(values) {
                body.insert((*field).to_owned(), serde_json::json!(typed(&value.get_untracked())));
            }
        }
        busy.set(true);
        error.set(None);
        let said = format!("Token {n:?} created with scope {s}.");
        run(
            page,
            "POST",
            "/api/v1/tokens".to_owned(),
            serde_json::Value::Object(body),
            said,
            error,
            busy,
            move |reply| {
                reply["token"].as_str().map(|secret| Revealed {
                    what: format!("the secret of token {} ({n})", reply["id"]),
                    secret: secret.to_owned(),
                })
            },
        );
    };
    let field_error = move |field: &'static str| Signal::derive(move || error.get().and_then(|r| r.about(field)));
    let other_error = move || {
        error
            .get()
            .filter(|r| {
                r.about("name").is_none()
                    && r.about("scope").is_none()
                    && !KINDS.iter().any(|(f, _)| r.about(f).is_some())
            })
            .map(|r| r.text)
    };
    view! {
        <form id="new-token-form" class="inline-form" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Add an API token"</legend>
                <Field id="new-token-name" label="Name (what uses it)" error=field_error("name")>
                    <input id="new-token-name" type="text" maxlength="64" autocomplete="off" aria-describedby="new-token-name-error"
                        prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </Field>
                <Field id="new-token-scope" label="Scope" error=field_error("scope")>
                    <select id="new-token-scope" aria-describedby="new-token-scope-error" prop:value=move || scope.get() on:change=move |ev| scope.set(event_target_value(&ev))>
                        <option value="dataplane" selected=true>"dataplane: draws, quota, outcomes"</option>
                        <option value="admin">"admin: the admin API, not users and tokens"</option>
                        <option value="metrics">"metrics: /metrics and readiness details, for a scraper"</option>
                    </select>
                </Field>
                {KINDS.iter().zip(values).map(|((field, label), value)| {
                    let input_id = format!("new-token-{field}");
                    view! {
                        <Field id=input_id.clone() label=*label error=field_error(field)>
                            <input id=input_id type="text" autocomplete="off" placeholder="e.g. acme, globex (or *)"
                                disabled=move || scope.get() != "dataplane"
                                prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
                        </Field>
                    }
                }).collect_view()}
                <button type="submit" id="new-token-submit">"Create token"</button>
            </fieldset>
            <p class="help">"A data-plane token serves only the names given; * for every one. Left empty, it serves none of that kind."</p>
            <p class="field-error" id="new-token-message" role="alert">{other_error}</p>
        </form>
    }
    .into_any()
}

/// The server's rules for a token name.
fn check_token_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.@ -".contains(c)) {
        return Err(Refusal::field("name", "must be 1 to 64 of ASCII letters, digits, space, '_', '.', '@', '-'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_lists_read_as_typed() {
        assert!(check_token_name("ci bot").is_ok());
        assert!(check_token_name("").is_err());
        assert!(check_token_name("x/y").is_err());
        assert_eq!(typed("acme, globex  initech"), ["acme", "globex", "initech"]);
        assert_eq!(typed(" any "), ["*"]);
        assert!(typed("").is_empty());
        assert_eq!(shown(&["*".to_owned()]), "any");
        assert_eq!(shown(&[]), "none");
    }
}
