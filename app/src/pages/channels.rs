//! Channels: each with its tier, whether it is enabled, its base weight, its pin and its
//! health in every pool holding it; operators and admins disable, enable and pin here.

use leptos::prelude::*;

use crate::api::{list_channels, ChannelView, SessionInfo};
use crate::components::layout::CurrentSession;

/// The channels resource, refetched after each change.
type ChannelsResource = Resource<Result<Vec<ChannelView>, ServerFnError>>;

/// Every channel.
#[component]
pub fn Channels() -> impl IntoView {
    let channels: ChannelsResource = Resource::new(|| (), |_| list_channels());
    let session = expect_context::<CurrentSession>().0;
    // Outside the table, so that it survives the refetch that follows a change.
    let done = RwSignal::new(None::<String>);
    view! {
        <h1>"Channels"</h1>
        <p id="channels-message" class="notice" role="status" aria-live="polite">{move || done.get()}</p>
        <section class="card">
            <Transition fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    let session = session.await.ok().flatten();
                    match channels.await {
                        Ok(list) if list.is_empty() => view! { <p>"No channels yet."</p> }.into_any(),
                        Ok(list) => view! { <ChannelTable channels=list session resource=channels done/> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">"Could not load the channels: " {e.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
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
    channels: Vec<ChannelView>,
    session: Option<SessionInfo>,
    resource: ChannelsResource,
    done: RwSignal<Option<String>>,
) -> impl IntoView {
    let may_operate = session.as_ref().is_some_and(|s| s.may_operate);
    let role = session.as_ref().map(|s| s.role.clone()).unwrap_or_default();
    let csrf = session.map(|s| s.csrf_token).unwrap_or_default();
    let restricted = (!may_operate).then(|| {
        view! {
            <p class="notice" id="channels-restricted">
                "Channels are disabled, enabled and pinned by the operator and admin roles; you are signed in as " {role} ", so this page is read-only."
            </p>
        }
    });
    view! {
        {restricted}
        <table class="grid" id="channels">
            <thead>
                <tr>
                    <th scope="col">"Code"</th>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Tier"</th>
                    <th scope="col">"Enabled"</th>
                    <th scope="col">"Base weight"</th>
                    <th scope="col">"Pin"</th>
                    <th scope="col">"Health per pool"</th>
                    {may_operate.then(|| view! { <th scope="col">"Change"</th> })}
                </tr>
            </thead>
            <tbody>
                {channels.into_iter().map(|c| {
                    let actions = may_operate.then(|| view! {
                        <td><ChannelActions code=c.code.clone() enabled=c.enabled pin=c.pin.clone() csrf=csrf.clone() resource done/></td>
                    }.into_any());
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
                                        " (effective weight " {p.effective_weight} ")"
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
                            <td>{c.base_weight}</td>
                            <td>{pin}</td>
                            <td>{pools}</td>
                            {actions}
                        </tr>
                    }.into_any()
                }).collect_view()}
            </tbody>
        </table>
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
/// with the session's CSRF token; the table is read again afterwards.
#[component]
fn ChannelActions(
    code: String,
    enabled: bool,
    pin: Option<String>,
    csrf: String,
    resource: ChannelsResource,
    done: RwSignal<Option<String>>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
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
                    resource.refetch();
                }
                Err(e) => {
                    message.set(Some(e));
                    busy.set(false);
                }
            }
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = (path, state, said, why, done, resource);
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
                <div class="field">
                    <label for=reason_id.clone()>"Reason for " {code.clone()} " (required, audited)"</label>
                    <input id=reason_id type="text" maxlength="500" required
                        prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
                </div>
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
