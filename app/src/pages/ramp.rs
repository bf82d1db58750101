//! A pool's ramp page (`/pools/{name}/ramp`): the newest ramp's step timeline (planned and
//! actual times), the step in force and its shares, the guards and a chart of each
//! member's success rate per evaluation with the threshold drawn and breaches marked, the
//! events with their reasons, and the controls each role may use (a reason asked for each).
//! Without a live ramp, those who edit start one here. Read again every few seconds.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use super::pool_limits::{submit_change, Change, EditTarget};
use crate::api::pools::get_pool;
use crate::api::ramps::pool_ramp;
use crate::api::rest::Refusal;
use crate::api::SessionInfo;
use crate::components::form::{described_by, required_reason, Field, ReasonField};
use crate::components::layout::CurrentSession;
use crate::components::number::percent;
use crate::components::plot::{Mark, Plot, Point, Rule, Series, Shape, Unit};
use crate::components::time::parse_utc;
use api::ramps::{RampDetail, RampSample, RampState};

/// The ramp page.
#[component]
pub fn RampPage() -> impl IntoView {
    let params = use_params_map();
    let name = move || params.with(|p| p.get("name").unwrap_or_default());
    let refreshes = RwSignal::new(0u32);
    // Read again only while the ramp is live (a start form being filled in is left alone);
    // the controls' reason and message live here, so a refresh keeps what was typed.
    let live = RwSignal::new(false);
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let ramp = Resource::new(move || (name(), refreshes.get()), |(n, _)| pool_ramp(n));
    let pool = Resource::new(name, get_pool);
    let session = expect_context::<CurrentSession>().0;
    crate::components::refresh::every_while_visible(refreshes, move || live.get_untracked());
    view! {
        <p><a href=move || format!("/pools/{}", name())>"← The pool"</a></p>
        <h1>"Ramp of pool " <code>{name}</code></h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                let pool = pool.await.ok().flatten();
                match (ramp.await, pool) {
                    (_, None) => view! { <p>"There is no such pool."</p> }.into_any(),
                    (Err(e), _) => view! { <p class="error" role="alert">"Could not load the ramp: " {e.to_string()}</p> }.into_any(),
                    (Ok(detail), Some(pool)) => {
                        let is_live = detail.as_ref().is_some_and(|d| d.ramp.state.is_live());
                        live.set(is_live);
                        let may_edit = session.as_ref().is_some_and(|s| s.may_edit);
                        let csrf = session.as_ref().map(|s| s.csrf_token.clone()).unwrap_or_default();
                        let target = EditTarget { pool: pool.name.clone(), version: pool.version, csrf };
                        let members: Vec<String> = pool.weights.iter().map(|w| format!("{}={}", w.member, w.weight)).collect();
                        view! {
                            {detail.map(|d| view! { <RampView detail=d session=session.clone() reason message/> })}
                            {(!is_live && may_edit).then(|| view! { <StartForm target weights=members.join(",")/> })}
                            {(!is_live && !may_edit).then(|| view! { <p id="ramp-start-restricted">"Ramps are started by the pm and admin roles."</p> })}
                        }.into_any()
                    }
                }
            })}
        </Transition>
    }
}

fn share_text(weights: &std::collections::BTreeMap<String, u64>) -> String {
    let total: u64 = weights.values().sum();
    weights
        .iter()
        .map(|(m, w)| format!("{m} {}", percent(if total == 0 { 0.0 } else { *w as f64 / total as f64 }, 2)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[component]
fn RampView(
    detail: RampDetail,
    session: Option<SessionInfo>,
    reason: RwSignal<String>,
    message: RwSignal<Option<String>>,
) -> impl IntoView {
    let r = detail.ramp.clone();
    let current = r.step;
    let steps = detail.steps.clone();
    view! {
        <section class="card" aria-labelledby="ramp-heading">
            <h2 id="ramp-heading">"Ramp " {r.id}</h2>
            <p id="ramp-state">
                "State " <strong class=format!("ramp-state ramp-{}", r.state) id="ramp-state-value">{r.state.as_str()}</strong>
                ", step " <strong id="ramp-step">{r.step}</strong> " of " {r.steps}
                ", canary " {r.canary.join(", ")} " at " <strong id="ramp-canary-share">{format!("{}%", r.canary_share)}</strong>
                ". Started by " {r.created_by.clone()} " at " {r.created_at.clone()} ": " {r.reason.clone()}
                {r.change_request.map(|id| view! { " (approved as change request #" {id} ")" })}
            </p>
            <p id="ramp-held">{detail.held.clone()}</p>
            <p>"Baseline: " {share_text(&detail.baseline)} ". On a breach: " <strong>{detail.on_breach.clone()}</strong>
               ". Abort: " {if detail.abort_seconds == 0 { "at once".to_owned() } else { format!("over {} s", detail.abort_seconds) }}
               ". Steps reach the tickets by " {detail.mode.clone()} "."</p>
            <table class="grid" id="ramp-timeline">
                <caption>"Steps (the last is the target)"</caption>
                <thead><tr>
                    <th scope="col">"Step"</th><th scope="col">"Shares"</th><th scope="col">"Hold"</th>
                    <th scope="col">"Min draws"</th><th scope="col">"Planned"</th><th scope="col">"Started"</th>
                </tr></thead>
                <tbody>
                    {steps.into_iter().map(|s| {
                        let now = s.index == current;
                        view! {
                            <tr data-step=s.index class:current=now aria-current=if now { Some("step") } else { None }>
                                <td>{s.index} {now.then_some(" (now)")}</td>
                                <td>{share_text(&s.weights)}</td>
                                <td>{s.hold.clone()}</td>
                                <td>{s.min_draws}</td>
                                <td>{s.planned_at.clone().unwrap_or_else(|| "—".into())}</td>
                                <td class="started">{s.started_at.clone().unwrap_or_else(|| "—".into())}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
            <h3>"Guards"</h3>
            {if detail.guards.is_empty() {
                view! { <p>"No guards: the steps advance on their holds alone."</p> }.into_any()
            } else {
                view! { <ul id="ramp-guards">{detail.guards.iter().map(|g| view! { <li>{g.clone()}</li> }).collect_view()}</ul> }.into_any()
            }}
            <GuardChart samples=detail.samples.clone() threshold=detail.thresholds.first().copied().flatten()/>
            <Controls detail=detail.clone() session reason message/>
            <h3>"What it did"</h3>
            <table class="grid" id="ramp-events">
                <thead><tr><th scope="col">"When"</th><th scope="col">"What"</th><th scope="col">"Step"</th><th scope="col">"Who"</th><th scope="col">"Why"</th></tr></thead>
                <tbody>
                    {detail.events.iter().rev().map(|e| view! {
                        <tr data-kind=e.kind.clone()>
                            <td>{e.at.clone()}</td><td>{e.kind.clone()}</td><td>{e.step}</td><td>{e.actor.clone()}</td>
                            <td>{e.sentence.clone()} {e.audit_id.map(|id| view! { " " <a href=format!("/audit?entity=pool:{}", detail.ramp.pool)>"(audit #" {id} ")"</a> })}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// Each member's success rate per evaluation (0..100 %) on a time axis, the first guard's
/// threshold dashed and the evaluations where a guard was breached numbered; hovering an
/// evaluation shows every member's rate and outcomes there.
#[component]
fn GuardChart(samples: Vec<RampSample>, threshold: Option<f64>) -> impl IntoView {
    if samples.is_empty() {
        return view! { <p id="ramp-chart-empty">"No evaluations yet: the guard job measures every 10 s."</p> }
            .into_any();
    }
    let at = |s: &RampSample| parse_utc(&s.at).map(|(ms, _)| ms);
    let timed: Vec<(i64, &RampSample)> = samples.iter().filter_map(|s| at(s).map(|ms| (ms, s))).collect();
    let from = timed.first().map_or(0, |t| t.0);
    let to = timed.last().map_or(0, |t| t.0).max(from + 60_000);
    let mut members: Vec<String> = samples.iter().flat_map(|s| s.members.keys().cloned()).collect();
    members.sort();
    members.dedup();
    let tones = ["c1", "c2", "c3", "c4", "c5"];
    let series: Vec<Series> = members
        .iter()
        .enumerate()
        .map(|(k, m)| Series {
            name: m.clone(),
            shape: Shape::Line,
            tone: tones[k % tones.len()],
            points: timed
                .iter()
                .filter_map(|(ms, s)| {
                    let member = s.members.get(m)?;
                    let rate = member["success_rate"].as_f64()?;
                    let outcomes = member["ok"].as_u64().unwrap_or(0) + member["fail"].as_u64().unwrap_or(0);
                    Some(Point { at_ms: *ms, value: rate, note: Some(format!("of {outcomes}, step {}", s.step)) })
                })
                .collect(),
        })
        .collect();
    let marks: Vec<Mark> = timed
        .iter()
        .filter(|(_, s)| s.guards.iter().any(|g| g["verdict"] == "breach"))
        .map(|(ms, s)| Mark { at_ms: *ms, label: format!("a guard breached at {} (step {})", s.at, s.step) })
        .collect();
    let rules: Vec<Rule> =
        threshold.map(|t| Rule { value: t, label: format!("threshold {}", percent(t, 1)) }).into_iter().collect();
    let breaches: Vec<String> = marks.iter().enumerate().map(|(i, m)| format!("{}: {}", i + 1, m.label)).collect();
    let summary = format!(
        "{} evaluations of {} member(s) from {} to {}; {}",
        samples.len(),
        members.len(),
        samples.first().map(|s| s.at.clone()).unwrap_or_default(),
        samples.last().map(|s| s.at.clone()).unwrap_or_default(),
        if breaches.is_empty() {
            "no guard breached.".to_owned()
        } else {
            format!("breaches: {}.", breaches.join("; "))
        }
    );
    view! {
        <Plot
            id="ramp-chart".to_owned()
            title="Success rate per member at each evaluation"
            unit=Unit::Percent
            series
            from_ms=from
            to_ms=to
            rules
            marks
            summary
        />
    }
    .into_any()
}

#[component]
fn Controls(
    detail: RampDetail,
    session: Option<SessionInfo>,
    reason: RwSignal<String>,
    message: RwSignal<Option<String>>,
) -> impl IntoView {
    let state = detail.ramp.state;
    let may_edit = session.as_ref().is_some_and(|s| s.may_edit);
    let may_halt = session.as_ref().is_some_and(|s| s.may_halt);
    let csrf = session.map(|s| s.csrf_token).unwrap_or_default();
    let live = matches!(state, RampState::Running | RampState::Paused);
    let controls: Vec<(&'static str, &'static str, bool)> = vec![
        ("promote", "Promote to the next step", may_edit && live),
        ("promote_to_end", "Promote to the target", may_edit && live),
        ("pause", "Pause", may_halt && state == RampState::Running),
        ("resume", "Resume", may_edit && state == RampState::Paused),
        ("step_back", "Step back", may_halt && live && detail.ramp.step > 0),
        ("abort", "Abort", may_halt && (live || state == RampState::Aborting)),
    ];
    let usable: Vec<_> = controls.into_iter().filter(|c| c.2).collect();
    if usable.is_empty() {
        return view! { <p id="ramp-controls-none">"No control is open to you on this ramp now."</p> }.into_any();
    }
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let id = detail.ramp.id;
    let csrf = StoredValue::new(csrf);
    view! {
        <div id="ramp-controls">
            <ReasonField id="ramp-reason" reason/>
            {usable.into_iter().map(|(control, label, _)| {
                let press = move |_| {
                    let why = match required_reason(reason) {
                        Ok(why) => why,
                        Err(e) => { message.set(Some(e)); return; }
                    };
                    busy.set(true);
                    let body = serde_json::json!({"reason": why});
                    let url = format!("/api/v1/ramps/{id}/{control}");
                    let csrf = csrf.get_value();
                    crate::api::rest::write_then_reload(url, csrf, body, busy,
                        move |refusal| message.set(Some(format!("Not done: {}", refusal.message()))));
                };
                view! {
                    <button type="button" id=format!("ramp-{control}") class=if control == "abort" { "danger" } else { "" }
                        disabled=move || !hydrated.get() || busy.get() on:click=press>{label}</button>
                }
            }).collect_view()}
            <p id="ramp-message" class="notice" role="status" aria-live="polite">{move || message.get()}</p>
        </div>
    }
    .into_any()
}

/// Starts a ramp: the target weights, the canary's share at each step, the hold, one
/// success-rate guard, what a breach does and how an abort returns; the weights now are the
/// baseline. Where an approval policy applies, it is submitted as a change request.
#[component]
fn StartForm(target: EditTarget, weights: String) -> impl IntoView {
    let target_text = RwSignal::new(weights);
    let shares = RwSignal::new("5, 20, 50".to_owned());
    let hold = RwSignal::new("600".to_owned());
    let min_success = RwSignal::new("95".to_owned());
    let on_breach = RwSignal::new("abort".to_owned());
    let abort_seconds = RwSignal::new("0".to_owned());
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let target = StoredValue::new(target);
    let refusal = RwSignal::new(None::<Refusal>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let fields = plan_fields(
            &target_text.get_untracked(),
            &shares.get_untracked(),
            &hold.get_untracked(),
            &min_success.get_untracked(),
            &on_breach.get_untracked(),
            &abort_seconds.get_untracked(),
        );
        let fields = match fields {
            Ok(fields) => fields,
            Err(wrong) => {
                message.set(None);
                refusal.set(Some(wrong));
                return;
            }
        };
        let change = Change { method: "POST", what: "ramps", refusal: Some(refusal) };
        submit_change(&target.get_value(), change, Ok(fields), reason, message, busy);
    };
    // A refusal about one of the fields goes under it; any other, to the message.
    let error_of = move |id: &'static str| {
        Signal::derive(move || {
            refusal.get().filter(|r| r.field.as_deref().map(form_field) == Some(Some(id))).map(|r| r.text)
        })
    };
    let general = move || {
        message.get().or_else(|| {
            refusal
                .get()
                .filter(|r| r.field.as_deref().and_then(form_field).is_none())
                .map(|r| format!("Not saved: {}", r.text))
        })
    };
    let field =
        |id: &'static str, label: &'static str, help: &'static str, example: &'static str, signal: RwSignal<String>| {
            view! {
                <Field id=id label=label help=help error=error_of(id)>
                    <input id=id type="text" placeholder=example aria-describedby=described_by(id)
                        prop:value=move || signal.get() on:input=move |ev| signal.set(event_target_value(&ev))/>
                </Field>
            }
        };
    view! {
        <section class="card" aria-labelledby="start-heading">
            <h2 id="start-heading">"Start a ramp"</h2>
            <form id="ramp-start" class="form-grid" on:submit=submit>
                {field("ramp-target", "Target weights", "member=weight for every member, separated by commas", "e.g. ALIPAY_A=45, WECHAT_B=30, UNION_C=50", target_text)}
                {field("ramp-shares", "Canary share at each step, %", "the canary's share of the draws at each step; the target follows the last", "e.g. 5, 20, 50", shares)}
                {field("ramp-hold", "Hold per step, seconds", "how long each step runs before the next, if the guard holds", "e.g. 600", hold)}
                {field("ramp-min-success", "Lowest success rate of the canary, %", "below it the guard is breached; 0 for no guard", "e.g. 95", min_success)}
                <Field id="ramp-on-breach" label="On a breach" help="what the ramp does when the guard is breached" error=error_of("ramp-on-breach")>
                    <select id="ramp-on-breach" aria-describedby=described_by("ramp-on-breach")
                        on:change=move |ev| on_breach.set(event_target_value(&ev)) prop:value=move || on_breach.get()>
                        <option value="abort">"abort"</option>
                        <option value="step_back">"step back"</option>
                        <option value="pause">"pause"</option>
                    </select>
                </Field>
                {field("ramp-abort-seconds", "Abort over, seconds", "how gradually an abort returns to the baseline; 0 for at once", "e.g. 300", abort_seconds)}
                <ReasonField id="ramp-start-reason" reason/>
                <button type="submit" id="ramp-start-button" disabled=move || !hydrated.get() || busy.get()>"Start the ramp"</button>
                <p id="ramp-start-message" class="notice" role="status" aria-live="polite">{general}</p>
            </form>
        </section>
    }
}

/// The start form's field for a field the API names in a refusal (`plan.steps[1].share`
/// is the shares field).
fn form_field(api: &str) -> Option<&'static str> {
    let root = api.split(['[', '.']).take(2).collect::<Vec<_>>();
    match root.as_slice() {
        ["plan", "target"] => Some("ramp-target"),
        ["plan", "steps"] => Some("ramp-shares"),
        ["plan", "hold_seconds"] => Some("ramp-hold"),
        ["plan", "guards"] => Some("ramp-min-success"),
        ["plan", "on_breach"] => Some("ramp-on-breach"),
        ["plan", "abort_seconds"] => Some("ramp-abort-seconds"),
        _ => None,
    }
}

/// The start form's fields as the body's `plan`, or what is wrong with them, naming the
/// field as the API does.
fn plan_fields(
    target: &str,
    shares: &str,
    hold: &str,
    min_success: &str,
    on_breach: &str,
    abort_seconds: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, Refusal> {
    let weights = engine::Weights::parse_spec(target).map_err(|e| Refusal::field("plan.target", e.to_string()))?;
    let target: Vec<serde_json::Value> =
        weights.iter().map(|(m, w)| serde_json::json!({"member": m, "weight": w})).collect();
    let mut steps = Vec::new();
    for part in shares.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let share: f64 = part.trim_end_matches('%').trim().parse().map_err(|_| {
            Refusal::field("plan.steps", format!("{part:?} is not a number: give percentages, e.g. 5, 20, 50"))
        })?;
        steps.push(serde_json::json!({"share": share}));
    }
    let number = |field: &str, raw: &str| -> Result<u64, Refusal> {
        raw.trim().parse::<u64>().map_err(|_| Refusal::field(field, format!("a whole number of seconds, not {raw:?}")))
    };
    let min: f64 = min_success
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| Refusal::field("plan.guards", format!("a percentage from 0 to 100, not {min_success:?}")))?;
    if !(0.0..=100.0).contains(&min) {
        return Err(Refusal::field("plan.guards", format!("a percentage from 0 to 100, not {min}")));
    }
    let mut plan = serde_json::json!({
        "target": target,
        "steps": steps,
        "hold_seconds": number("plan.hold_seconds", hold)?,
        "on_breach": on_breach,
        "abort_seconds": number("plan.abort_seconds", abort_seconds)?,
    });
    if min > 0.0 {
        plan["guards"] = serde_json::json!([{"metric": "success_rate", "threshold": min / 100.0, "min_samples": 20}]);
    }
    let mut fields = serde_json::Map::new();
    fields.insert("plan".into(), plan);
    Ok(fields)
}
