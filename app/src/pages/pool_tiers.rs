//! Adaptive tiers on a tiers pool's page: the pool's tier policy, each channel's tier and
//! what its recent windows said, and the moves the policy found; those who may edit accept
//! or dismiss an open move here (with a reason), and the page reloads to show the result.

use api::tiers::{AdaptiveTiers, TierMove};
use leptos::prelude::*;

use crate::api::pools::pool_tiers;
use crate::components::form::{required_reason, ReasonField};
use crate::components::number::percent;

fn rates(rates: &[f64]) -> String {
    if rates.is_empty() {
        "—".into()
    } else {
        rates.iter().map(|r| percent(*r, 1)).collect::<Vec<_>>().join(", ")
    }
}

fn mode_text(tiers: &AdaptiveTiers) -> String {
    let p = &tiers.policy;
    let mode = serde_json::to_value(p.mode).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    format!(
        "Mode {mode}: windows of {} min, at least {} outcomes; G at ≥ {}, N at ≥ {}, margin {}; {} windows in a row to move, at most one move per {} min.",
        p.window_minutes,
        p.min_volume,
        percent(p.good_at_least, 1),
        percent(p.normal_at_least, 1),
        percent(p.margin, 1),
        p.windows,
        p.cooldown_ms / 60_000
    )
}

/// The adaptive-tiers section of a tiers pool's page.
#[component]
pub fn PoolTiers(pool: String, csrf: String, may_edit: bool) -> impl IntoView {
    let name = pool.clone();
    let tiers = Resource::new(move || name.clone(), pool_tiers);
    let reason = RwSignal::new(String::new());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let target = StoredValue::new((pool, csrf));
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match tiers.await {
                    Ok(Some(t)) => {
                        let open = t.moves.iter().any(|m| m.state == "open");
                        view! {
                            <p id="tier-policy">{mode_text(&t)}</p>
                            <table class="grid" id="tier-ratings">
                                <thead><tr>
                                    <th scope="col">"Channel"</th>
                                    <th scope="col">"Tier"</th>
                                    <th scope="col">"Windows point"</th>
                                    <th scope="col">"Their success rates"</th>
                                    <th scope="col">"Last moved"</th>
                                </tr></thead>
                                <tbody>
                                    {t.channels.into_iter().map(|c| { let key = c.channel.clone(); view! {
                                        <tr data-channel=key>
                                            <td><code>{c.channel}</code></td>
                                            <td>{c.tier}</td>
                                            <td>{c.direction.unwrap_or_else(|| "at its tier".into())}</td>
                                            <td>{rates(&c.rates)}</td>
                                            <td>{c.last_move_at.unwrap_or_else(|| "never".into())}</td>
                                        </tr>
                                    }}).collect_view()}
                                </tbody>
                            </table>
                            {(may_edit && open).then(|| view! { <ReasonField id="tier-move-reason" reason/> })}
                            <p id="tier-move-message" class="notice" role="status" aria-live="polite">{move || message.get()}</p>
                            <Moves moves=t.moves may_edit target reason message busy hydrated/>
                        }.into_any()
                    }
                    Ok(None) => ().into_any(),
                    Err(e) => view! { <p class="error" role="alert">"Could not load the tier policy: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn Moves(
    moves: Vec<TierMove>,
    may_edit: bool,
    target: StoredValue<(String, String)>,
    reason: RwSignal<String>,
    message: RwSignal<Option<String>>,
    busy: RwSignal<bool>,
    hydrated: RwSignal<bool>,
) -> impl IntoView {
    if moves.is_empty() {
        return view! { <p id="tier-moves-none">"No moves found yet."</p> }.into_any();
    }
    view! {
        <table class="grid" id="tier-moves">
            <thead><tr>
                <th scope="col">"Found"</th>
                <th scope="col">"Channel"</th>
                <th scope="col">"Move"</th>
                <th scope="col">"Success rates"</th>
                <th scope="col">"State"</th>
                <th scope="col"><span class="visually-hidden">"Decide"</span></th>
            </tr></thead>
            <tbody>
                {moves.into_iter().map(|m| {
                    let id = m.id;
                    let send = move |what: &'static str| decide(target, id, what, reason, message, busy);
                    let state = match (&m.note, &m.decided_by) {
                        (Some(note), _) => format!("{} ({note})", m.state),
                        (None, Some(by)) => format!("{} by {by}", m.state),
                        _ => m.state.clone(),
                    };
                    view! {
                        <tr data-move=id>
                            <td>{m.created_at.clone()}</td>
                            <td><code>{m.channel.clone()}</code></td>
                            <td>{format!("{} → {}", m.from, m.to)}</td>
                            <td>{format!("{} (windows of {} min)", rates(&m.rates), m.window_minutes)}</td>
                            <td>{state}</td>
                            <td>
                                {(may_edit && m.state == "open").then(|| view! {
                                    <button type="button" id=format!("accept-move-{id}")
                                        disabled=move || !hydrated.get() || busy.get()
                                        on:click=move |_| send("accept")>"Accept"</button>
                                    " "
                                    <button type="button" id=format!("dismiss-move-{id}")
                                        disabled=move || !hydrated.get() || busy.get()
                                        on:click=move |_| send("dismiss")>"Dismiss"</button>
                                })}
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// Sends the decision with the reason; reloads the page when it is made, says why when not.
fn decide(
    target: StoredValue<(String, String)>,
    id: i64,
    what: &'static str,
    reason: RwSignal<String>,
    message: RwSignal<Option<String>>,
    busy: RwSignal<bool>,
) {
    let why = match required_reason(reason) {
        Ok(why) => why,
        Err(e) => {
            message.set(Some(e));
            return;
        }
    };
    busy.set(true);
    message.set(None);
    let (pool, csrf) = target.get_value();
    let body = serde_json::json!({"reason": why});
    let url = format!("/api/v1/pools/{pool}/tier_moves/{id}/{what}");
    crate::api::rest::write_then_reload(url, csrf, body, busy, move |refusal| {
        let word = if what == "accept" { "accepted" } else { "dismissed" };
        message.set(Some(format!("Not {word}: {}", refusal.message())));
    });
}
