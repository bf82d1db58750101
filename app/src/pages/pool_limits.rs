//! A pool's peak windows and per-member daily caps: read-only for most roles, editors for
//! pm and admin. Every field is checked as it is typed (the engine's own rules for peak
//! windows), with the message beside the field; the server checks again and its refusal is
//! shown too. A stale edit shows the change that came in between.

use engine::peak::{parse_local_time, PeakSchedule, PeakWindow};
use engine::Weights;
use leptos::prelude::*;

use crate::api::rest::Refusal;
use crate::api::PeakWindowView;
use crate::components::form::{required_reason, Field, ReasonField};

/// The pool an editor writes to: its name, the configuration version the page shows (the
/// edit's `expected_version`) and the session's CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditTarget {
    pub pool: String,
    pub version: i64,
    pub csrf: String,
}

/// The most a peak window may multiply the batch by (the server refuses more).
const MAX_MULTIPLIER: u32 = 1000;

/// The largest daily cap (Lua holds integers exactly up to 2^53 − 1).
const MAX_CAP: u64 = api::MAX_INTEGER;

/// Peak windows and caps as configured, for roles that may not change them.
#[component]
pub fn LimitsTable(timezone: String, windows: Vec<PeakWindowView>, caps: Vec<(String, u64)>) -> impl IntoView {
    let windows = if windows.is_empty() {
        view! { <p id="peak-windows">"No peak windows."</p> }.into_any()
    } else {
        view! {
            <table class="grid" id="peak-windows">
                <caption>"Peak windows (" {timezone} ")"</caption>
                <thead><tr><th scope="col">"From"</th><th scope="col">"To"</th><th scope="col">"Batch ×"</th><th scope="col">"Own weights"</th></tr></thead>
                <tbody>
                    {windows.into_iter().map(|w| view! {
                        <tr><td>{w.start}</td><td>{w.end}</td><td>{w.multiplier}</td><td>{if w.weights.is_some() { "yes" } else { "no" }}</td></tr>
                    }).collect_view()}
                </tbody>
            </table>
        }
        .into_any()
    };
    let caps = if caps.is_empty() {
        view! { <p id="caps">"No daily caps."</p> }.into_any()
    } else {
        view! {
            <table class="grid" id="caps">
                <caption>"Daily caps (most draws a member serves in a local day)"</caption>
                <thead><tr><th scope="col">"Channel"</th><th scope="col">"Cap"</th></tr></thead>
                <tbody>{caps.into_iter().map(|(m, c)| view! { <tr><td><code>{m}</code></td><td>{c}</td></tr> }).collect_view()}</tbody>
            </table>
        }
        .into_any()
    };
    view! { {windows} {caps} }
}

/// One peak window as typed.
#[derive(Clone)]
struct WindowRow {
    key: usize,
    start: RwSignal<String>,
    end: RwSignal<String>,
    multiplier: RwSignal<String>,
    /// A window's own weights are kept as they are (edited through the API).
    weights: Option<serde_json::Value>,
}

/// What is wrong with one typed window, by field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct WindowErrors {
    start: Option<String>,
    end: Option<String>,
    multiplier: Option<String>,
}

impl WindowErrors {
    fn any(&self) -> bool {
        self.start.is_some() || self.end.is_some() || self.multiplier.is_some()
    }
}

/// Checks one window with the engine's rules; the window when it is valid.
fn check_window(
    start: &str,
    end: &str,
    multiplier: &str,
    weights: Option<&serde_json::Value>,
) -> (WindowErrors, Option<PeakWindow>) {
    let mut errors = WindowErrors::default();
    let s = parse_local_time(start.trim()).map_err(|e| errors.start = Some(e.to_string())).ok();
    let e = parse_local_time(end.trim()).map_err(|e| errors.end = Some(e.to_string())).ok();
    let m = match multiplier.trim().parse::<u32>() {
        Ok(m) if (1..=MAX_MULTIPLIER).contains(&m) => Some(m),
        _ => {
            errors.multiplier = Some(format!("the batch multiplier must be a whole number from 1 to {MAX_MULTIPLIER}"));
            None
        }
    };
    let weights: Option<Weights> = weights.and_then(|w| serde_json::from_value(w.clone()).ok());
    let window = match (s, e, m) {
        (Some(s), Some(e), Some(m)) => match PeakWindow::new(s, e, m, weights) {
            Ok(w) => Some(w),
            Err(err) => {
                errors.end = Some(err.to_string());
                None
            }
        },
        _ => None,
    };
    (errors, window)
}

/// The peak-window editor: rows of start, end and batch multiplier, added and removed,
/// checked as typed (times, multiplier, start ≠ end, no overlap), with a required reason.
#[component]
pub fn PeakWindowsForm(target: EditTarget, timezone: String, windows: Vec<PeakWindowView>) -> impl IntoView {
    let next_key = StoredValue::new(windows.len());
    let rows = RwSignal::new(
        windows
            .into_iter()
            .enumerate()
            .map(|(key, w)| WindowRow {
                key,
                start: RwSignal::new(w.start),
                end: RwSignal::new(w.end),
                multiplier: RwSignal::new(w.multiplier.to_string()),
                weights: w.weights,
            })
            .collect::<Vec<_>>(),
    );
    // Every row's errors, and the windows as the API takes them when every row is valid
    // and none overlap.
    let checked = Memo::new(move |_| {
        let mut errors = Vec::new();
        let mut valid = Vec::new();
        for r in rows.get() {
            let (e, w) = check_window(&r.start.get(), &r.end.get(), &r.multiplier.get(), r.weights.as_ref());
            errors.push((r.key, e));
            valid.extend(w);
        }
        let schedule = if errors.iter().all(|(_, e)| !e.any()) {
            PeakSchedule::check_windows(&valid)
                .map(|()| valid.iter().map(window_json).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        } else {
            Err("fix the fields marked above".to_owned())
        };
        (errors, schedule)
    });
    let error_of = move |key: usize, pick: fn(&WindowErrors) -> Option<String>| {
        move || checked.with(|(errors, _)| errors.iter().find(|(k, _)| *k == key).and_then(|(_, e)| pick(e)))
    };
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let add = move |_| {
        let key = next_key.get_value();
        next_key.set_value(key + 1);
        rows.update(|r| {
            r.push(WindowRow {
                key,
                start: RwSignal::new(String::new()),
                end: RwSignal::new(String::new()),
                multiplier: RwSignal::new("2".into()),
                weights: None,
            })
        });
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let fields =
            checked.with_untracked(|(_, s)| s.clone()).map(|windows| fields_of("peak_windows", windows.into()));
        submit_change(
            &target,
            Change { method: "PUT", what: "peak_windows", refusal: None },
            fields,
            reason,
            message,
            busy,
        );
    };
    view! {
        <form id="peak-form" class="form-grid" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Peak windows (local time in " {timezone} "; a window ending before it starts crosses midnight)"</legend>
                <table class="grid" id="peak-windows">
                    <thead><tr><th scope="col">"From"</th><th scope="col">"To"</th><th scope="col">"Batch ×"</th><th scope="col"><span class="visually-hidden">"Remove"</span></th></tr></thead>
                    <tbody>
                        <For each=move || rows.get() key=|r| r.key children=move |row: WindowRow| {
                                let key = row.key;
                                let (start, end, multiplier) = (row.start, row.end, row.multiplier);
                                view! {
                                    <tr data-window=key>
                                        <td>
                                            <label class="visually-hidden" for=format!("peak-start-{key}")>"From (HH:MM)"</label>
                                            <input id=format!("peak-start-{key}") type="text" size="6" placeholder="e.g. 19:00" aria-describedby=format!("peak-start-error-{key}")
                                                prop:value=move || start.get() on:input=move |ev| start.set(event_target_value(&ev))/>
                                            <span class="field-error" id=format!("peak-start-error-{key}")>{error_of(key, |e| e.start.clone())}</span>
                                        </td>
                                        <td>
                                            <label class="visually-hidden" for=format!("peak-end-{key}")>"To (HH:MM)"</label>
                                            <input id=format!("peak-end-{key}") type="text" size="6" placeholder="e.g. 23:30" aria-describedby=format!("peak-end-error-{key}")
                                                prop:value=move || end.get() on:input=move |ev| end.set(event_target_value(&ev))/>
                                            <span class="field-error" id=format!("peak-end-error-{key}")>{error_of(key, |e| e.end.clone())}</span>
                                        </td>
                                        <td>
                                            <label class="visually-hidden" for=format!("peak-multiplier-{key}")>"Batch multiplier"</label>
                                            <input id=format!("peak-multiplier-{key}") type="text" inputmode="numeric" size="4" aria-describedby=format!("peak-multiplier-error-{key}")
                                                prop:value=move || multiplier.get() on:input=move |ev| multiplier.set(event_target_value(&ev))/>
                                            <span class="field-error" id=format!("peak-multiplier-error-{key}")>{error_of(key, |e| e.multiplier.clone())}</span>
                                        </td>
                                        <td>
                                            <button type="button" class="secondary" id=format!("peak-remove-{key}")
                                                on:click=move |_| rows.update(|r| r.retain(|w| w.key != key))>"Remove"</button>
                                        </td>
                                    </tr>
                                }
                            } />
                    </tbody>
                </table>
                <p class="field-error" id="peak-error" role="alert">
                    {move || checked.with(|(errors, s)| match s {
                        Err(e) if errors.iter().all(|(_, e)| !e.any()) => Some(e.clone()),
                        _ => None,
                    })}
                </p>
                <button type="button" class="secondary" id="peak-add" on:click=add>"Add a window"</button>
                <ReasonField id="peak-reason" reason/>
                <button type="submit" id="peak-submit">"Save peak windows"</button>
            </fieldset>
            <p id="peak-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
    }
}

/// A window as the API takes it (its own weights, if any, included).
fn window_json(w: &PeakWindow) -> serde_json::Value {
    serde_json::to_value(w).unwrap_or_default()
}

/// Checks a typed cap: empty for none, else a whole number in 1..=2^53−1.
fn check_cap(typed: &str) -> Result<Option<u64>, String> {
    let t = typed.trim();
    if t.is_empty() {
        return Ok(None);
    }
    match t.parse::<u64>() {
        Ok(c) if (1..=MAX_CAP).contains(&c) => Ok(Some(c)),
        _ => Err(format!("a cap is a whole number from 1 to {MAX_CAP} (2^53 − 1); leave it empty for none")),
    }
}

/// The caps editor: one field per member channel, empty for no cap, checked as typed.
#[component]
pub fn CapsForm(target: EditTarget, channels: Vec<String>, caps: Vec<(String, u64)>) -> impl IntoView {
    let rows: Vec<(String, RwSignal<String>)> = channels
        .into_iter()
        .map(|c| {
            let cap = caps.iter().find(|(m, _)| *m == c).map(|(_, v)| v.to_string()).unwrap_or_default();
            (c, RwSignal::new(cap))
        })
        .collect();
    let typed = rows.clone();
    let checked = Memo::new(move |_| {
        let mut caps = serde_json::Map::new();
        for (m, v) in &typed {
            match check_cap(&v.get()) {
                Ok(Some(c)) => {
                    caps.insert(m.clone(), c.into());
                }
                Ok(None) => {}
                Err(_) => return Err(format!("the cap of {m} is not valid")),
            }
        }
        Ok(serde_json::Value::Object(caps))
    });
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let fields = checked.get_untracked().map(|caps| fields_of("caps", caps));
        submit_change(&target, Change { method: "PUT", what: "caps", refusal: None }, fields, reason, message, busy);
    };
    view! {
        <form id="caps-form" class="form-grid" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Daily caps: the most draws a channel serves in a local day (empty: no cap)"</legend>
                {rows.into_iter().map(|(channel, value)| {
                    let id = format!("cap-{channel}");
                    let error_id = format!("{id}-error");
                    view! {
                        <Field id=id.clone() label=channel.clone() error=Signal::derive(move || check_cap(&value.get()).err())>
                            <input id=id type="text" inputmode="numeric" size="12" aria-describedby=error_id
                                prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
                        </Field>
                    }
                }).collect_view()}
                <ReasonField id="caps-reason" reason/>
                <button type="submit" id="caps-submit">"Save caps"</button>
            </fieldset>
            <p id="caps-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
    }
}

/// What a pool form sends: its method and path under `/api/v1/pools/{pool}/`.
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub method: &'static str,
    pub what: &'static str,
    /// Where a refusal naming a field goes, for the form to show under that field (the
    /// rest goes to the message); `None`: every refusal goes to the message.
    pub refusal: Option<RwSignal<Option<Refusal>>>,
}

/// The submit step every pool form shares: the form's checked fields (or why they are not
/// valid), the required reason and the version edited are sent as one change; the page
/// reloads when it is saved, and `message` says why when it is not (with the change that
/// came in between when the edit was stale).
pub fn submit_change(
    target: &EditTarget,
    change: Change,
    fields: Result<serde_json::Map<String, serde_json::Value>, String>,
    reason: RwSignal<String>,
    message: RwSignal<Option<String>>,
    busy: RwSignal<bool>,
) {
    let mut body = match fields {
        Ok(fields) => fields,
        Err(e) => {
            message.set(Some(format!("Not saved: {e}.")));
            return;
        }
    };
    let why = match required_reason(reason) {
        Ok(why) => why,
        Err(e) => {
            message.set(Some(e));
            return;
        }
    };
    body.insert("reason".into(), why.into());
    body.insert("expected_version".into(), target.version.into());
    busy.set(true);
    message.set(None);
    if let Some(refusal) = change.refusal {
        refusal.set(None);
    }
    let (_target, _body) = (target.clone(), serde_json::Value::Object(body));
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        let url = format!("/api/v1/pools/{}/{}", _target.pool, change.what);
        match crate::api::rest::send(change.method, &url, &_target.csrf, &_body).await {
            Ok(_) => {
                let _ = window().location().reload();
            }
            // An approval policy applies: the same change goes for review instead.
            Err(refusal) if refusal.field.as_deref() == Some("policy") => {
                let mut operation = _body.clone();
                if let Some(fields) = operation.as_object_mut() {
                    fields.remove("reason");
                    fields.remove("expected_version");
                    let kind = match change.what {
                        "members" => "pool.member_add".to_owned(),
                        "restore" => "pool.restore_version".to_owned(),
                        "ramps" => "pool.ramp".to_owned(),
                        what => format!("pool.{what}"),
                    };
                    fields.insert("kind".into(), kind.into());
                }
                let proposal = serde_json::json!({
                    "pool": _target.pool.clone(),
                    "operation": operation,
                    "reason": _body["reason"].clone(),
                    "expected_version": _body["expected_version"].clone(),
                });
                let text = match crate::api::rest::send("POST", "/api/v1/changes", &_target.csrf, &proposal).await {
                    Ok(request) => format!(
                        "An approval policy applies to this pool: submitted for review as change request #{} \
                         (it needs {} approval(s) by {}; see Changes).",
                        request["id"],
                        request["required_approvals"],
                        request["approver_roles"]
                            .as_array()
                            .map(|r| r.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(" or "))
                            .unwrap_or_default()
                    ),
                    Err(again) => format!("Not saved: {}", again.message()),
                };
                message.set(Some(text));
                busy.set(false);
            }
            Err(refusal) if refusal.field.is_some() && change.refusal.is_some() => {
                if let Some(shown) = change.refusal {
                    shown.set(Some(refusal));
                }
                busy.set(false);
            }
            Err(refusal) => {
                let text = match refusal.conflict_version() {
                    Some(now) => crate::api::rest::pool_conflict(&_target.pool, _target.version, now).await,
                    None => format!("Not saved: {}", refusal.message()),
                };
                message.set(Some(text));
                busy.set(false);
            }
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (change.method, change.what, change.refusal);
}

/// One field as the body's only member.
pub(crate) fn fields_of(name: &str, value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = serde_json::Map::new();
    fields.insert(name.to_owned(), value);
    fields
}
