//! Channels: a list searched, sorted and paged on the server (the query in the URL), each
//! row with its tier, whether it is enabled, its base weight, its pin and its health in
//! every pool holding it. Operators and admins change a channel in one dialog per row
//! (disable, enable, pin, unpin), which asks the reason there.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::channels::CHANNEL_SORTS;
use crate::api::{list_channels, ChannelList, ChannelView, SessionInfo};
use crate::components::charts::grouped;
use crate::components::dialog::{return_focus_on_close, trap_tab};
use crate::components::form::Field;
use crate::components::layout::CurrentSession;
use crate::components::list::{neighbours, query_of, summary, Paging, SearchForm};

/// The channels resource, refetched after each change.
type ChannelsResource = Resource<Result<ChannelList, ServerFnError>>;

/// The channels list: search, sort and pages, all in the URL.
#[component]
pub fn Channels() -> impl IntoView {
    let params = use_query_map();
    let query = move || params.with(query_of);
    let channels: ChannelsResource = Resource::new(query, |q| list_channels(q.q, q.sort, q.page));
    let session = expect_context::<CurrentSession>().0;
    // Outside the table, so that it survives the refetch that follows a change.
    let done = RwSignal::new(None::<String>);
    // The channel whose change dialog is open.
    let editing = RwSignal::new(None::<ChannelView>);
    view! {
        <h1>"Channels"</h1>
        <p id="channels-message" class="notice" role="status" aria-live="polite">{move || done.get()}</p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                let q = query();
                let form = view! {
                    <SearchForm path="/channels" id="channel" label="Code or name contains" aria_label="Search channels"
                        q=q.q.clone().unwrap_or_default() sort=q.sort.clone().unwrap_or_else(|| "code".into()) sorts=&CHANNEL_SORTS/>
                };
                let csrf = session.as_ref().map(|s| s.csrf_token.clone()).unwrap_or_default();
                let dialog = move || editing.get().map(|c| view! { <ChangeDialog channel=c csrf=csrf.clone() resource=channels done editing/> });
                match channels.await {
                    Ok(list) if list.total == 0 && list.q.is_empty() => view! { {form} <p>"No channels yet."</p> }.into_any(),
                    Ok(list) => view! { {form} <section class="card"><ChannelTable list session editing/></section> {dialog} }.into_any(),
                    Err(e) => view! { {form} <p class="error" role="alert">"Could not load the channels: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// A badge's class for a health state; the state is always written out as well.
fn health_class(state: &str) -> &'static str {
    match state {
        "healthy" => "badge ok",
        "ejected" => "badge bad",
        _ => "badge warn",
    }
}

#[component]
fn ChannelTable(
    list: ChannelList,
    session: Option<SessionInfo>,
    editing: RwSignal<Option<ChannelView>>,
) -> impl IntoView {
    let may_operate = session.as_ref().is_some_and(|s| s.may_operate);
    let role = session.as_ref().map(|s| s.role.clone()).unwrap_or_default();
    let restricted = (!may_operate).then(|| {
        view! {
            <p class="notice" id="channels-restricted">
                "Channels are disabled, enabled and pinned by the operator and admin roles; you are signed in as " {role} ", so this page is read-only."
            </p>
        }
    });
    let summary = summary(list.total, "channel", &list.q, list.page, list.pages);
    let (previous, next) = neighbours(list.page, list.pages, |n| list.href("/channels", "code", n));
    view! {
        {restricted}
        <p id="channels-summary" role="status">{summary}</p>
        <div class="table-wrap">
        <table class="grid" id="channels">
            <thead>
                <tr>
                    <th scope="col">"Code"</th>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Tier"</th>
                    <th scope="col">"Enabled"</th>
                    <th scope="col" class="number">"Base weight"</th>
                    <th scope="col">"Pin"</th>
                    <th scope="col">"Health per pool"</th>
                    {may_operate.then(|| view! { <th scope="col">"Change"</th> })}
                </tr>
            </thead>
            <tbody>
                {list.rows.into_iter().map(|c| {
                    let actions = may_operate.then(|| {
                        let (code, channel) = (c.code.clone(), c.clone());
                        view! {
                            <td><button type="button" id=format!("change-{code}") aria-haspopup="dialog"
                                aria-label=format!("Change {code}") on:click=move |_| editing.set(Some(channel.clone()))>"Change…"</button></td>
                        }
                    });
                    let (enabled_class, enabled_text) = if c.enabled { ("badge ok", "enabled") } else { ("badge bad", "disabled") };
                    let pin = match c.pin.clone().map(|state| (health_class(&state), state)) {
                        Some((class, state)) => view! { <span class=class id=format!("pin-{}", c.code)>"pinned " {state}</span> }.into_any(),
                        None => view! { <span id=format!("pin-{}", c.code)>"none"</span> }.into_any(),
                    };
                    let pools = if c.pools.is_empty() {
                        view! { <span>"in no pool"</span> }.into_any()
                    } else {
                        view! {
                            <ul class="plain">
                                {c.pools.iter().map(|p| view! {
                                    <li data-pool=p.pool.clone()>
                                        <code>{p.pool.clone()}</code>" "
                                        <span class=health_class(&p.state)>{p.state.clone()}</span>
                                        " (effective weight " {grouped(p.effective_weight)} ")"
                                    </li>
                                }).collect_view()}
                            </ul>
                        }.into_any()
                    };
                    view! {
                        <tr data-channel=c.code.clone()>
                            <td><a href=format!("/channels/{}", c.code) title="health history"><code>{c.code.clone()}</code></a></td>
                            <td>{c.name}</td>
                            <td>{c.tier.unwrap_or_else(|| "none".to_owned())}</td>
                            <td><span class=enabled_class id=format!("enabled-{}", c.code)>{enabled_text}</span></td>
                            <td class="number">{grouped(c.base_weight.max(0) as u64)}</td>
                            <td>{pin}</td>
                            <td>{pools}</td>
                            {actions}
                        </tr>
                    }.into_any()
                }).collect_view()}
            </tbody>
        </table>
        </div>
        <Paging id="channels" previous next/>
    }
}

/// The change dialog of one channel: what it is now, a required reason and the changes that
/// apply; Escape or Close shuts it.
#[component]
fn ChangeDialog(
    channel: ChannelView,
    csrf: String,
    resource: ChannelsResource,
    done: RwSignal<Option<String>>,
    editing: RwSignal<Option<ChannelView>>,
) -> impl IntoView {
    let code = channel.code.clone();
    return_focus_on_close(format!("change-{code}"));
    let heading = format!("dialog-{code}-heading");
    let labelled_by = heading.clone();
    let state = format!(
        "{}; pin {}",
        if channel.enabled { "enabled" } else { "disabled" },
        channel.pin.clone().unwrap_or_else(|| "none".to_owned())
    );
    view! {
        <div class="dialog-backdrop">
            <section class="dialog card" role="dialog" aria-modal="true" aria-labelledby=labelled_by id="change-dialog"
                on:keydown=move |ev: leptos::ev::KeyboardEvent| {
                    if ev.key() == "Escape" {
                        editing.set(None)
                    } else {
                        trap_tab(&ev, "change-dialog")
                    }
                }>
                <h2 id=heading>"Change " <code>{code.clone()}</code></h2>
                <p>{channel.name.clone()} ": " {state}</p>
                <ChannelActions code=code.clone() enabled=channel.enabled pin=channel.pin.clone() csrf resource done editing/>
                <button type="button" id="dialog-close" on:click=move |_| editing.set(None)>"Close"</button>
            </section>
        </div>
    }
}

/// What an operator can do to a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Disable,
    Enable,
    PinHealthy,
    PinEjected,
    Unpin,
}

impl Change {
    /// The REST path (under `/api/v1/channels/{code}`), the pin state sent, and what the
    /// page says once done.
    fn request(self, code: &str) -> (String, Option<&'static str>, String) {
        let path = |tail: &str| format!("/api/v1/channels/{code}/{tail}");
        match self {
            Self::Disable => (path("disable"), None, format!("{code} disabled.")),
            Self::Enable => (path("enable"), None, format!("{code} enabled.")),
            Self::PinHealthy => (path("health/pin"), Some("healthy"), format!("{code} pinned healthy.")),
            Self::PinEjected => (path("health/pin"), Some("ejected"), format!("{code} pinned ejected.")),
            Self::Unpin => (path("health/unpin"), None, format!("{code} unpinned: health evaluation decides again.")),
        }
    }
}

/// A required reason and the changes that apply to the channel now, posted to the REST API
/// with the session's CSRF token; the dialog closes and the table is read again afterwards.
#[component]
fn ChannelActions(
    code: String,
    enabled: bool,
    pin: Option<String>,
    csrf: String,
    resource: ChannelsResource,
    done: RwSignal<Option<String>>,
    editing: RwSignal<Option<ChannelView>>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    // The reason is where the dialog starts (keyboard users type it at once).
    let reason_input = NodeRef::<leptos::html::Input>::new();
    Effect::new(move |_| {
        if let Some(input) = reason_input.get() {
            // After the frame that attaches the dialog: an element not yet in the page
            // takes no focus.
            request_animation_frame(move || {
                let _ = input.focus();
            });
        }
    });
    let id = |what: &str| format!("{what}-{}", code);
    let (reason_id, message_id) = (id("reason"), id("message"));
    let stored = StoredValue::new((code.clone(), csrf));
    let act = move |change: Change| {
        let why = reason.get_untracked().trim().to_owned();
        if why.is_empty() {
            message.set(Some("A reason is required: it goes into the audit trail.".into()));
            return;
        }
        let (code, _csrf) = stored.get_value();
        let (path, state, said) = change.request(&code);
        busy.set(true);
        message.set(None);
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            match post_change(&path, &_csrf, state, why).await {
                Ok(()) => {
                    done.set(Some(said));
                    editing.set(None);
                    resource.refetch();
                }
                Err(e) => {
                    message.set(Some(e));
                    busy.set(false);
                }
            }
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = (path, state, said, why, done, resource, editing);
    };
    let button = move |change: Change, id: String, label: String, text: &'static str| {
        view! { <button type="button" id=id aria-label=label on:click=move |_| act(change)>{text}</button> }.into_any()
    };
    let switch = if enabled {
        button(Change::Disable, id("disable"), format!("Disable {code}"), "Disable")
    } else {
        button(Change::Enable, id("enable"), format!("Enable {code}"), "Enable")
    };
    let pin_healthy = (pin.as_deref() != Some("healthy"))
        .then(|| button(Change::PinHealthy, id("pin-healthy"), format!("Pin {code} healthy"), "Pin healthy"));
    let pin_ejected = (pin.as_deref() != Some("ejected"))
        .then(|| button(Change::PinEjected, id("pin-ejected"), format!("Pin {code} ejected"), "Pin ejected"));
    let unpin = pin.is_some().then(|| button(Change::Unpin, id("unpin"), format!("Unpin {code}"), "Unpin"));
    view! {
        <form class="channel-actions" id=id("actions") on:submit=|ev: leptos::ev::SubmitEvent| ev.prevent_default()>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend class="visually-hidden">"Change " {code.clone()}</legend>
                <Field id=reason_id.clone() label=format!("Reason for {code} (required, audited)")>
                    <input id=reason_id node_ref=reason_input type="text" maxlength="500" required
                        prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
                </Field>
                <div class="buttons">{switch} {pin_healthy} {pin_ejected} {unpin}</div>
            </fieldset>
            <p id=message_id class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
    }
    .into_any()
}

/// Posts a change with its reason (and pin state); `Err` holds the sentence to show.
#[cfg(feature = "hydrate")]
async fn post_change(path: &str, csrf: &str, state: Option<&str>, reason: String) -> Result<(), String> {
    let body = match state {
        Some(state) => serde_json::json!({"state": state, "reason": reason}),
        None => serde_json::json!({"reason": reason}),
    };
    let response = gloo_net::http::Request::post(path)
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
    let why = reply["error"].as_str().map(str::to_owned).unwrap_or_else(|| format!("the server answered {status}"));
    Err(format!("Not changed: {why}"))
}
