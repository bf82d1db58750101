//! Ticket pools: the list (searched, sorted and paged on the server, the query in the URL),
//! and one pool with its members' configured and effective weights
//! and health; pms and admins change its weights (with a preview computed by the engine in
//! the browser), peak windows and caps here.

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use engine::preview::{preview, MemberPreview, OrderingPreview, Preview, PREVIEW_WINDOW, STRIP_TICKETS};
use engine::{BatchSize, Ordering, WeightError, Weights};

use crate::api::pools::POOL_SORTS;
use crate::api::{get_pool, list_pools, MemberView, PoolDetail, PoolList, SessionInfo, WeightEntry};
use crate::components::charts::grouped;
use crate::components::detail::{DetailPage, ShowFound};
use crate::components::form::ReasonField;
use crate::components::list::{neighbours, query_of, summary, Paging, SearchForm};
use crate::components::number::percent;
use crate::pages::pool_history::PoolHistory;
use crate::pages::pool_limits::{submit_change, CapsForm, Change, EditTarget, LimitsTable, PeakWindowsForm};
use crate::pages::pool_replay::PoolReplay;
use crate::pages::pool_tiers::PoolTiers;

/// The pools list: search, sort and pages, all in the URL.
#[component]
pub fn Pools() -> impl IntoView {
    let params = use_query_map();
    let query = move || params.with(query_of);
    let pools = Resource::new(query, |q| list_pools(q.q, q.sort, q.page));
    view! {
        <h1>"Pools"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let q = query();
                let form = view! {
                    <SearchForm path="/pools" id="pool" label="Name contains" aria_label="Search pools"
                        q=q.q.clone().unwrap_or_default() sort=q.sort.clone().unwrap_or_else(|| "name".into()) sorts=&POOL_SORTS/>
                };
                match pools.await {
                    Ok(list) if list.total == 0 && list.q.is_empty() => view! { {form} <p>"No pools yet."</p> }.into_any(),
                    Ok(list) => view! { {form} <PoolTable list/> }.into_any(),
                    Err(e) => view! { {form} <p class="error" role="alert">"Could not load the pools: " {e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn PoolTable(list: PoolList) -> impl IntoView {
    if list.total == 0 {
        return view! { <p id="pools-none">{format!("No pool's name contains \"{}\".", list.q)}</p> }.into_any();
    }
    let summary = summary(list.total, "pool", &list.q, list.page, list.pages);
    let (previous, next) = neighbours(list.page, list.pages, |n| list.href("/pools", "name", n));
    view! {
        <p id="pools-summary" role="status">{summary}</p>
        <section class="card table-wrap">
        <table class="grid" id="pools">
            <thead>
                <tr>
                    <th scope="col">"Pool"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col" class="number">"Version"</th>
                    <th scope="col" class="number">"Published"</th>
                    <th scope="col" class="number">"Members"</th>
                    <th scope="col" class="number">"Out (ejected or disabled)"</th>
                </tr>
            </thead>
            <tbody>
                {list.rows.into_iter().map(|p| view! {
                    <tr data-pool=p.name.clone()>
                        <th scope="row"><a href=format!("/pools/{}", p.name)>{p.name.clone()}</a></th>
                        <td>{p.kind}</td>
                        <td class="number">{grouped(p.version.max(0) as u64)}</td>
                        <td class="number">{grouped(p.published_version.max(0) as u64)}</td>
                        <td class="number">{grouped(p.members.max(0) as u64)}</td>
                        <td class="number">{grouped(p.ejected.max(0) as u64)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        </section>
        <Paging id="pools" previous next/>
    }
    .into_any()
}

/// One pool.
#[component]
pub fn PoolPage() -> impl IntoView {
    let params = use_params_map();
    let name = Signal::derive(move || params.with(|p| p.get("name").unwrap_or_default()));
    let found = Resource::new(move || name.get(), get_pool);
    let show: ShowFound<PoolDetail> = Arc::new(|pool, session| view! { <PoolView pool session/> }.into_any());
    view! { <DetailPage list="/pools" plural="pools" kind="pool" name found show/> }
}

#[component]
fn PoolView(pool: PoolDetail, session: Option<SessionInfo>) -> impl IntoView {
    let may_edit = session.as_ref().is_some_and(|s| s.may_edit);
    let role = session.as_ref().map(|s| s.role.clone()).unwrap_or_default();
    let csrf = session.map(|s| s.csrf_token).unwrap_or_default();
    let tiers_csrf = csrf.clone();
    let replay_csrf = csrf.clone();
    // The weights the editor holds now, for a replay through them before they are saved.
    let typed = RwSignal::new(None::<Weights>);
    let target = EditTarget { pool: pool.name.clone(), version: pool.version, csrf };
    let history_target = target.clone();
    let channels: Vec<String> = pool.members.iter().map(|m| m.channel.clone()).collect();
    let (weights_editor, limits_editors) = if may_edit {
        (
            view! { <WeightsForm target=target.clone() weights=pool.weights.clone() batch_size=pool.batch_size ordering=pool.ordering.clone() typed_weights=typed/> }.into_any(),
            view! {
                <PeakWindowsForm target=target.clone() timezone=pool.timezone.clone() windows=pool.peak_windows.clone()/>
                <CapsForm target channels caps=pool.caps.clone()/>
            }
            .into_any(),
        )
    } else {
        (
            view! {
                <p class="notice" id="weights-restricted">"Weights are changed by the pm and admin roles; you are signed in as " {role.clone()} "."</p>
                <WeightsTable weights=pool.weights.clone()/>
            }
            .into_any(),
            view! { <LimitsTable timezone=pool.timezone.clone() windows=pool.peak_windows.clone() caps=pool.caps.clone()/> }.into_any(),
        )
    };
    view! {
        <h1>"Pool " <code>{pool.name.clone()}</code></h1>
        <p>
            "Kind " <strong id="pool-kind">{pool.kind.clone()}</strong> ", configuration version " <strong id="pool-version">{pool.version}</strong>
            ", " {pool.batch_size} " tickets a batch, ordering " <strong id="pool-ordering">{pool.ordering.clone()}</strong>
            ", day in " {pool.timezone.clone()}
        </p>
        {(pool.kind == "channels").then(|| view! {
            <p><a id="pool-ramp-link" href=format!("/pools/{}/ramp", pool.name)>"Ramp: stage a gray release of these weights, guarded by the channels' outcomes →"</a></p>
        })}
        <section class="card" aria-labelledby="members-heading">
            <h2 id="members-heading">"Members"</h2>
            <Members members=pool.members/>
        </section>
        <section class="card" aria-labelledby="weights-heading">
            <h2 id="weights-heading">{if pool.kind == "tiers" { "Tier weights" } else { "Weights" }}</h2>
            {weights_editor}
        </section>
        <section class="card" aria-labelledby="limits-heading">
            <h2 id="limits-heading">"Peak windows and daily caps"</h2>
            {limits_editors}
        </section>
        {(pool.kind == "tiers").then(|| view! {
            <section class="card" aria-labelledby="tiers-heading">
                <h2 id="tiers-heading">"Adaptive tiers"</h2>
                <PoolTiers pool=pool.name.clone() csrf=tiers_csrf may_edit/>
            </section>
        })}
        <section class="card" aria-labelledby="replay-heading">
            <h2 id="replay-heading">"Traffic replay"</h2>
            <PoolReplay pool=pool.name.clone() csrf=replay_csrf typed=may_edit.then_some(typed)/>
        </section>
        <section class="card" aria-labelledby="history-heading">
            <h2 id="history-heading">"Version history"</h2>
            <PoolHistory target=history_target may_edit/>
        </section>
    }
}

/// The configured weights, for those who may not change them.
#[component]
fn WeightsTable(weights: Vec<WeightEntry>) -> impl IntoView {
    view! {
        <table class="grid" id="weights">
            <thead><tr><th scope="col">"Member"</th><th scope="col">"Weight"</th></tr></thead>
            <tbody>
                {weights.into_iter().map(|w| view! { <tr><td><code>{w.member}</code></td><td>{w.weight}</td></tr> }).collect_view()}
            </tbody>
        </table>
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

/// Weights as typed (integers, decimals or percentages), checked and previewed by the
/// engine (compiled to wasm) on every keystroke: expected shares, tickets per batch, and how
/// evenly the pool's ordering spreads them, the current weights beside the new ones. A
/// reason is required; drain or immediate. Posted to the REST API with the session's CSRF
/// token; a stale edit (409) is shown with the change that came in between.
#[component]
fn WeightsForm(
    target: EditTarget,
    weights: Vec<WeightEntry>,
    batch_size: u32,
    ordering: String,
    typed_weights: RwSignal<Option<Weights>>,
) -> impl IntoView {
    let batch = BatchSize::new(u64::from(batch_size), BatchSize::ABSOLUTE_MAX).unwrap_or(BatchSize::DEFAULT);
    let ordering = if ordering == "shuffle" { Ordering::Shuffle } else { Ordering::Smooth };
    let current = Weights::from_integers(weights.iter().map(|w| (w.member.clone(), w.weight)))
        .ok()
        .map(|w| preview(&w, batch, ordering));
    let rows: Vec<(String, RwSignal<String>)> =
        weights.into_iter().map(|w| (w.member, RwSignal::new(w.weight.to_string()))).collect();
    let typed = rows.clone();
    let parsed = Memo::new(move |_| {
        let pairs: Vec<(String, String)> = typed.iter().map(|(m, v)| (m.clone(), v.get())).collect();
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(m, v)| (m.as_str(), v.as_str())).collect();
        Weights::parse(&refs)
    });
    let proposed = Memo::new(move |_| parsed.with(|p| p.as_ref().ok().map(|w| preview(w, batch, ordering))));
    Effect::new(move |_| typed_weights.set(parsed.with(|p| p.as_ref().ok().cloned())));
    let reason = RwSignal::new(String::new());
    let mode = RwSignal::new("drain".to_owned());
    let message = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let version = target.version;
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let fields = parsed.get_untracked().map_err(|e| e.to_string()).map(|weights| {
            let entries: Vec<serde_json::Value> =
                weights.iter().map(|(m, w)| serde_json::json!({"member": m, "weight": w})).collect();
            let mut fields = serde_json::Map::new();
            fields.insert("weights".into(), entries.into());
            fields.insert("mode".into(), mode.get_untracked().into());
            fields
        });
        submit_change(
            &target,
            Change { method: "POST", what: "weights", refusal: None },
            fields,
            reason,
            message,
            busy,
        );
    };
    let current_for_rows = current.clone();
    view! {
        <form id="weights-form" on:submit=submit>
            <fieldset class="weights" disabled=move || !hydrated.get() || busy.get()>
                <legend>"Change weights (against version " {version} "): whole numbers, decimals (0.45) or percentages (45%)"</legend>
                <table class="grid preview" id="weights-preview">
                    <caption>"Preview: computed in your browser as the refill job would build " {batch.get()} "-ticket batches (" {ordering_name(ordering)} " ordering)"</caption>
                    <thead>
                        <tr>
                            <th scope="col">"Member"</th>
                            <th scope="col">"New weight"</th>
                            <th scope="col">"Share now"</th>
                            <th scope="col">"New share"</th>
                            <th scope="col">"Tickets a batch now"</th>
                            <th scope="col">"New tickets a batch"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {rows.into_iter().enumerate().map(|(i, (member, value))| {
                            let id = format!("weight-{member}");
                            let error_id = format!("weight-error-{member}");
                            let now = current_for_rows.as_ref().and_then(|p| p.members.get(i).cloned());
                            let name = member.clone();
                            let field_error = move || parsed.with(|p| match p {
                                Err(e) if error_member(e) == Some(name.as_str()) => Some(e.to_string()),
                                _ => None,
                            });
                            let new_share = move || proposed.with(|p| p.as_ref().and_then(|p| p.members.get(i)).map(|m| percent(m.share, 2)).unwrap_or_else(|| "–".into()));
                            let new_count = move || proposed.with(|p| p.as_ref().and_then(|p| p.members.get(i)).map(batch_count).unwrap_or_else(|| "–".into()));
                            view! {
                                <tr data-member=member.clone()>
                                    <th scope="row"><label for=id.clone()>{member.clone()}</label></th>
                                    <td>
                                        <input id=id type="text" inputmode="decimal" required size="8" aria-describedby=error_id.clone()
                                            prop:value=move || value.get() on:input=move |ev| value.set(event_target_value(&ev))/>
                                        <span class="field-error" id=error_id role="alert">{field_error}</span>
                                    </td>
                                    <td>{now.as_ref().map(|m| percent(m.share, 2))}</td>
                                    <td id=format!("preview-share-{member}")>{new_share}</td>
                                    <td>{now.as_ref().map(batch_count)}</td>
                                    <td id=format!("preview-count-{member}")>{new_count}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
                <PreviewStrips current=current.clone() proposed/>
                <dl class="facts" id="preview-spread">
                    <dt>"Largest deviation in any " {PREVIEW_WINDOW} " draws in a row"</dt>
                    <dd>
                        "now " <span id="preview-dev-old">{current.as_ref().map(|p| deviation(p.spread.as_ref()))}</span>
                        ", new " <span id="preview-dev-new">{move || proposed.with(|p| p.as_ref().map(|p| deviation(p.spread.as_ref())).unwrap_or_else(|| "–".into()))}</span>
                    </dd>
                    <dt>"Longest run of one member"</dt>
                    <dd>
                        "now " <span id="preview-run-old">{current.as_ref().map(|p| longest_run(p.spread.as_ref()))}</span>
                        ", new " <span id="preview-run-new">{move || proposed.with(|p| p.as_ref().map(|p| longest_run(p.spread.as_ref())).unwrap_or_else(|| "–".into()))}</span>
                    </dd>
                </dl>
                <p class="field-error" id="weights-error" role="alert">
                    {move || parsed.with(|p| match p {
                        Err(e) if error_member(e).is_none() => Some(e.to_string()),
                        _ => None,
                    })}
                </p>
                <div class="field">
                    <label for="weights-mode">"When"</label>
                    <select id="weights-mode" on:change=move |ev| mode.set(event_target_value(&ev))>
                        <option value="drain" selected=true>"drain: from the next batch"</option>
                        <option value="immediate">"immediate: replace the remaining tickets now"</option>
                    </select>
                </div>
                <ReasonField id="weights-reason" reason/>
                <button type="submit" id="weights-submit">"Save weights"</button>
            </fieldset>
            <p id="weights-message" class="error" role="alert" aria-live="assertive">{move || message.get()}</p>
        </form>
    }
}

/// The member a weights error is about (shown beside that field), if it names one.
fn error_member(e: &WeightError) -> Option<&str> {
    match e {
        WeightError::DuplicateMember { member }
        | WeightError::Negative { member, .. }
        | WeightError::NotFinite { member, .. }
        | WeightError::Invalid { member, .. }
        | WeightError::TooPrecise { member, .. }
        | WeightError::Overflow { member } => Some(member),
        _ => None,
    }
}

fn ordering_name(o: Ordering) -> &'static str {
    match o {
        Ordering::Shuffle => "shuffle",
        Ordering::Smooth => "smooth",
    }
}

fn batch_count(m: &MemberPreview) -> String {
    if m.batch_min == m.batch_max {
        m.batch_min.to_string()
    } else {
        format!("{}–{}", m.batch_min, m.batch_max)
    }
}

fn deviation(spread: Option<&OrderingPreview>) -> String {
    spread
        .map(|s| format!("{:.1} tickets", s.max_window_dev))
        .unwrap_or_else(|| "not measured (batch too large to preview)".into())
}

fn longest_run(spread: Option<&OrderingPreview>) -> String {
    spread
        .map(|s| format!("{} ({})", s.longest_run, s.longest_run_member))
        .unwrap_or_else(|| "not measured (batch too large to preview)".into())
}

/// The colours of the strips' cells, by member index (repeating after eight; each cell's
/// title and the legend name the member, so colour is never the only signal).
const STRIP_COLOURS: [&str; 8] =
    ["#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#475569"];

/// The first tickets of the ordering as coloured cells, now and with the weights typed, so
/// that clumps show before saving.
#[component]
fn PreviewStrips(current: Option<Preview>, proposed: Memo<Option<Preview>>) -> impl IntoView {
    let legend = current
        .as_ref()
        .map(|p| {
            p.members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    view! {
                        <li><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect width="10" height="10" fill=STRIP_COLOURS[i % STRIP_COLOURS.len()]></rect></svg>{m.member.clone()}</li>
                    }
                })
                .collect_view()
        });
    let now = current.clone();
    view! {
        <figure class="preview-strips">
            <figcaption>"The first " {STRIP_TICKETS} " tickets in draw order, one cell each (hover a cell for its member)"</figcaption>
            <Strip id="strip-now" label="now" preview=now/>
            {move || view! { <Strip id="strip-new" label="new" preview=proposed.get()/> }}
            <ul class="legend">{legend}</ul>
        </figure>
    }
}

#[component]
fn Strip(id: &'static str, label: &'static str, preview: Option<Preview>) -> impl IntoView {
    let Some((members, head)) = preview.and_then(|p| p.spread.map(|s| (p.members, s.head))) else {
        return view! { <p id=id>{label} ": –"</p> }.into_any();
    };
    let sequence = head.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let cells = head
        .iter()
        .enumerate()
        .map(|(x, &m)| {
            let name = members.get(m as usize).map(|p| p.member.clone()).unwrap_or_default();
            view! {
                <rect x=x.to_string() y="0" width="1" height="10" fill=STRIP_COLOURS[m as usize % STRIP_COLOURS.len()]>
                    <title>{format!("ticket {}: {name}", x + 1)}</title>
                </rect>
            }
        })
        .collect_view();
    view! {
        <div class="strip-row">
            <span class="strip-label">{label}</span>
            <svg class="strip" id=id data-sequence=sequence viewBox=format!("0 0 {} 10", head.len()) preserveAspectRatio="none"
                role="img" aria-label=format!("{label}: the first {} tickets in draw order", head.len())>
                {cells}
            </svg>
        </div>
    }
    .into_any()
}
