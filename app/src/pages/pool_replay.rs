//! Traffic replay on a pool's page: the draws the pool really served in a period (its draw
//! log) run through its published configuration, or through the weights typed in the
//! weights editor before they are saved, and the report beside what actually happened.
//! Sent to `POST /api/v1/pools/{pool}/replay`, which writes nothing.

use api::replay::{MemberReplay, ReplayReport, SequenceSummary};
use engine::Weights;
use leptos::prelude::*;

use crate::components::form::Field;
use crate::components::number::percent;

/// The periods offered, in minutes back from now; `custom` takes two local times.
const PERIODS: [(&str, &str); 5] = [
    ("15", "the last 15 minutes"),
    ("60", "the last hour"),
    ("360", "the last 6 hours"),
    ("1440", "the last 24 hours"),
    ("10080", "the last 7 days"),
];

fn rate(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_owned(), |x| percent(x, 2))
}

/// The traffic-replay section of a pool's page. `typed`: the weights the editor holds now
/// (`None` when they do not parse), for those who may edit; replaying through them is then
/// offered.
#[component]
pub fn PoolReplay(pool: String, csrf: String, typed: Option<RwSignal<Option<Weights>>>) -> impl IntoView {
    let period = RwSignal::new("60".to_owned());
    let from = RwSignal::new(String::new());
    let to = RwSignal::new(String::new());
    let through = RwSignal::new("published".to_owned());
    let message = RwSignal::new(None::<String>);
    let report = RwSignal::new(None::<ReplayReport>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let target = StoredValue::new((pool, csrf));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let weights = match (through.get_untracked().as_str(), typed) {
            ("weights", Some(typed)) => match typed.get_untracked() {
                Some(w) => Some(w),
                None => {
                    message.set(Some("Not replayed: the weights typed above do not parse.".into()));
                    return;
                }
            },
            _ => None,
        };
        let span = Span { period: period.get_untracked(), from: from.get_untracked(), to: to.get_untracked() };
        send(target, span, weights, message, report, busy);
    };
    view! {
        <p>
            "What would the traffic this pool really served have done under another configuration? "
            "The draws of a period, minute by minute as its draw log recorded them, are run through the pool as published now"
            {typed.is_some().then_some(", or through the weights typed in the editor above")}
            ", and compared with what happened."
        </p>
        <form id="replay-form" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Replay recorded traffic"</legend>
                <Field id="replay-period" label="Period">
                    <select id="replay-period" on:change=move |ev| period.set(event_target_value(&ev))>
                        {PERIODS.into_iter().map(|(value, label)| view! {
                            <option value=value selected=value == "60">{label}</option>
                        }).collect_view()}
                        <option value="custom">"from … to … (your local time)"</option>
                    </select>
                </Field>
                <Show when=move || period.get() == "custom">
                    <Field id="replay-from" label="From">
                        <input id="replay-from" type="datetime-local" step="60" required
                            prop:value=move || from.get() on:input=move |ev| from.set(event_target_value(&ev))/>
                    </Field>
                    <Field id="replay-to" label="To">
                        <input id="replay-to" type="datetime-local" step="60" required
                            prop:value=move || to.get() on:input=move |ev| to.set(event_target_value(&ev))/>
                    </Field>
                </Show>
                <Field id="replay-through" label="Through">
                    <select id="replay-through" on:change=move |ev| through.set(event_target_value(&ev))>
                        <option value="published" selected=true>"the pool as published now"</option>
                        {typed.is_some().then(|| view! { <option value="weights">"the weights typed above, before they are saved"</option> })}
                    </select>
                </Field>
                <button type="submit" id="replay-submit">{move || if busy.get() { "Replaying…" } else { "Replay" }}</button>
            </fieldset>
            <p id="replay-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
        {move || report.get().map(|r| view! { <Report report=r/> })}
    }
}

/// The period as the form holds it (read where the form is sent: in the browser).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Span {
    period: String,
    from: String,
    to: String,
}

#[component]
fn Report(report: ReplayReport) -> impl IntoView {
    let through = match (report.through.as_str(), report.config_version) {
        ("weights", Some(v)) => format!("the weights typed (on version {v})"),
        (_, Some(v)) => format!("version {v} as published"),
        _ => "the candidate".to_owned(),
    };
    let counted = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let summary = format!(
        "{} recorded from {} to {} (UTC), in {} with draws; replayed through {through}: {} built, {} refused at their caps.",
        counted(report.recorded.draws, "draw", "draws"),
        report.from,
        report.to,
        counted(report.minutes, "minute", "minutes"),
        counted(report.batches, "batch", "batches"),
        counted(report.refused, "draw", "draws"),
    );
    let window = report.window;
    view! {
        <div id="replay-report">
            <p id="replay-summary">{summary}</p>
            <table class="grid" id="replay-members">
                <thead><tr>
                    <th scope="col">"Member"</th>
                    <th scope="col">"Expected share"</th>
                    <th scope="col">"Recorded"</th>
                    <th scope="col">"Replayed"</th>
                    <th scope="col">"Cap hits"</th>
                    <th scope="col">"Success rate (recorded outcomes)"</th>
                </tr></thead>
                <tbody>
                    {report.members.into_iter().map(|m: MemberReplay| { let key = m.member.clone(); view! {
                        <tr data-member=key>
                            <th scope="row"><code>{m.member}</code></th>
                            <td>{percent(m.expected_share, 2)}</td>
                            <td class="recorded">{format!("{} ({})", m.recorded_draws, percent(m.recorded_share, 2))}</td>
                            <td class="replayed">{format!("{} ({})", m.replayed_draws, percent(m.replayed_share, 2))}</td>
                            <td class="cap-hits">{m.cap_hits}</td>
                            <td>{if m.outcomes == 0 { "no outcomes".to_owned() } else { format!("{} of {}", rate(m.success_rate), m.outcomes) }}</td>
                        </tr>
                    }}).collect_view()}
                </tbody>
            </table>
            <table class="grid" id="replay-sequences">
                <thead><tr>
                    <th scope="col">"Sequence"</th>
                    <th scope="col">"Draws"</th>
                    <th scope="col">"Expected success"</th>
                    <th scope="col">{format!("Largest deviation in {window} tickets")}</th>
                    <th scope="col">"Longest run"</th>
                </tr></thead>
                <tbody>
                    <Sequence id="replay-recorded" label="what happened" s=report.recorded/>
                    <Sequence id="replay-replayed" label="the replay" s=report.replayed/>
                </tbody>
            </table>
        </div>
    }
}

#[component]
fn Sequence(id: &'static str, label: &'static str, s: SequenceSummary) -> impl IntoView {
    let run = match &s.longest_run_member {
        Some(m) => format!("{} ({m})", s.longest_run),
        None => s.longest_run.to_string(),
    };
    view! {
        <tr id=id>
            <th scope="row">{label}</th>
            <td>{s.draws}</td>
            <td>{rate(s.expected_success_rate)}</td>
            <td>{format!("{:.2} tickets", s.max_window_deviation)}</td>
            <td>{run}</td>
        </tr>
    }
}

/// Sends the replay; shows the report, or says why there is none.
fn send(
    target: StoredValue<(String, String)>,
    span: Span,
    weights: Option<Weights>,
    message: RwSignal<Option<String>>,
    report: RwSignal<Option<ReplayReport>>,
    busy: RwSignal<bool>,
) {
    #[cfg(not(feature = "hydrate"))]
    let _ = (target, span, weights, report);
    message.set(None);
    #[cfg(feature = "hydrate")]
    {
        let (pool, csrf) = target.get_value();
        let (from, to) = match period_of(&span) {
            Ok(period) => period,
            Err(e) => {
                message.set(Some(e));
                return;
            }
        };
        let mut body = serde_json::json!({"from": from, "to": to});
        if let Some(w) = weights {
            let entries: Vec<serde_json::Value> =
                w.iter().map(|(m, w)| serde_json::json!({"member": m, "weight": w})).collect();
            body["weights"] = entries.into();
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            let url = format!("/api/v1/pools/{pool}/replay");
            match crate::api::rest::send("POST", &url, &csrf, &body).await {
                Ok(reply) => match serde_json::from_value::<ReplayReport>(reply) {
                    Ok(r) => report.set(Some(r)),
                    Err(e) => message.set(Some(format!("The server's report could not be read: {e}"))),
                },
                Err(refusal) => {
                    report.set(None);
                    message.set(Some(format!("Not replayed: {}", refusal.message())));
                }
            }
            busy.set(false);
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = busy;
}

/// The period's start and end as RFC 3339 (UTC): whole minutes back from now (the current
/// minute included: the draw log keeps draws by the minute), or the two local times typed.
#[cfg(feature = "hydrate")]
fn period_of(span: &Span) -> Result<(String, String), String> {
    use wasm_bindgen::JsValue;
    let iso = |ms: f64| String::from(js_sys::Date::new(&JsValue::from_f64(ms)).to_iso_string());
    if span.period != "custom" {
        let minutes: f64 = span.period.parse().map_err(|_| format!("Unknown period {:?}.", span.period))?;
        let end = (js_sys::Date::now() / 60_000.0).floor() * 60_000.0 + 60_000.0;
        return Ok((iso(end - minutes * 60_000.0), iso(end)));
    }
    // A datetime-local value (2026-12-03T10:00) is read as the browser's local time.
    let local = |label: &str, raw: &str| {
        let t = js_sys::Date::new(&JsValue::from_str(raw)).get_time();
        if raw.is_empty() || t.is_nan() {
            Err(format!("{label}: give a date and a time."))
        } else {
            Ok(t)
        }
    };
    let (from, to) = (local("From", &span.from)?, local("To", &span.to)?);
    if to <= from {
        return Err("To: must be after From.".into());
    }
    Ok((iso(from), iso(to)))
}
