//! One channel's health: the last hour of its outcome reports (success rate against each
//! pool's threshold, volume, latency, with the health transitions marked on the same time
//! axis), and for each pool holding it, its effective weight over time as a step chart
//! with every transition marked and numbered, and the same transitions as a table (the
//! chart's text alternative).

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::{channel_history, ChannelDetail, PoolDecay};
use crate::components::detail::{DetailPage, ShowFound};
use crate::components::number::percent;
use crate::components::outcome_chart::OutcomeCharts;
use crate::components::plot::{Mark, Plot, Point, Rule, Series, Shape, Unit};

/// How far back a chart reaches when the channel has no older transition.
const MIN_SPAN_MS: i64 = 3_600_000;

/// One channel.
#[component]
pub fn ChannelPage() -> impl IntoView {
    let params = use_params_map();
    let code = Signal::derive(move || params.with(|p| p.get("code").unwrap_or_default()));
    let found = Resource::new(move || code.get(), channel_history);
    let show: ShowFound<ChannelDetail> = Arc::new(|channel, _| view! { <ChannelView channel/> }.into_any());
    view! { <DetailPage list="/channels" plural="channels" kind="channel" name=code found show/> }
}

#[component]
fn ChannelView(channel: ChannelDetail) -> impl IntoView {
    let now = channel.now_ms;
    // The outcome charts end with the minute under way (a minute is drawn at its middle).
    let end = (now.div_euclid(60_000) + 1) * 60_000;
    let start = end - 3_600_000;
    let thresholds: Vec<Rule> = channel
        .pools
        .iter()
        .map(|p| Rule {
            label: format!("pool {} threshold {}", p.pool, percent(p.min_success_rate, 1)),
            value: p.min_success_rate,
        })
        .collect();
    let marks: Vec<Mark> = {
        let mut marks: Vec<Mark> = channel
            .pools
            .iter()
            .flat_map(|p| {
                p.points
                    .iter()
                    .filter(|t| t.at_ms >= start)
                    .map(|t| Mark { at_ms: t.at_ms, label: format!("{}: {} → {} at {}", p.pool, t.from, t.to, t.at) })
            })
            .collect();
        marks.sort_by_key(|m| m.at_ms);
        marks
    };
    let outcomes = match channel.outcomes {
        Ok(minutes) => view! {
            <OutcomeCharts id=format!("outcomes-{}", channel.code) minutes thresholds marks=marks.clone() start end/>
            {(!marks.is_empty()).then(|| view! {
                <ol class="marks">{marks.iter().map(|m| view! { <li>{m.label.clone()}</li> }).collect_view()}</ol>
            })}
        }
        .into_any(),
        Err(why) => view! { <p class="notice">{why}</p> }.into_any(),
    };
    let pools = if channel.pools.is_empty() {
        view! { <p>"This channel is in no pool."</p> }.into_any()
    } else {
        channel.pools.into_iter().map(|p| view! { <PoolHistory pool=p now/> }).collect_view().into_any()
    };
    view! {
        <h1>"Channel " <code id="channel-code">{channel.code.clone()}</code></h1>
        <p>
            {channel.name} ", " {if channel.enabled { "enabled" } else { "disabled" }}
            {channel.pin.map(|p| format!(", pinned {p}"))}
        </p>
        <section class="card" aria-labelledby="outcomes-heading">
            <h2 id="outcomes-heading">"Outcomes, last hour"</h2>
            {outcomes}
        </section>
        {pools}
    }
}

#[component]
fn PoolHistory(pool: PoolDecay, now: i64) -> impl IntoView {
    let start = pool.points.first().map(|p| p.at_ms.min(now - MIN_SPAN_MS)).unwrap_or(now - MIN_SPAN_MS);
    // The weight before the first transition, then after each.
    let first = pool.points.first().map_or(pool.effective_weight, |p| p.weight_before);
    let mut points =
        vec![Point { at_ms: start, value: first as f64, note: Some("before the first transition shown".to_owned()) }];
    points.extend(pool.points.iter().map(|p| Point {
        at_ms: p.at_ms,
        value: p.effective_weight as f64,
        note: Some(format!("{} → {}", p.from, p.to)),
    }));
    let marks: Vec<Mark> = pool
        .points
        .iter()
        .map(|p| Mark { at_ms: p.at_ms, label: format!("{} → {} at {}", p.from, p.to, p.at) })
        .collect();
    let id = format!("decay-{}", pool.pool);
    let title = format!("Effective weight in pool {} (base weight {})", pool.pool, pool.base_weight);
    let summary = format!(
        "{} transitions; the effective weight is {} of {} now ({}).",
        marks.len(),
        pool.effective_weight,
        pool.base_weight,
        pool.state
    );
    let series = vec![Series { name: "effective weight".to_owned(), shape: Shape::Step, tone: "accent", points }];
    let heading = format!("history-{}-heading", pool.pool);
    let labelled_by = heading.clone();
    let key = pool.pool.clone();
    let rows = if pool.points.is_empty() {
        view! { <p>"No health transitions recorded: it has been " {pool.state.clone()} " throughout."</p> }.into_any()
    } else {
        view! {
            <table class="grid" id=format!("transitions-{}", pool.pool)>
                <thead>
                    <tr>
                        <th scope="col">"#"</th>
                        <th scope="col">"When (UTC)"</th>
                        <th scope="col">"From → to"</th>
                        <th scope="col">"Effective weight"</th>
                        <th scope="col">"Success rate"</th>
                        <th scope="col">"Why"</th>
                    </tr>
                </thead>
                <tbody>
                    {pool.points.into_iter().enumerate().map(|(i, p)| view! {
                        <tr>
                            <td>{i + 1}</td>
                            <td class="nowrap">{p.at}</td>
                            <td>{p.from} " → " <strong>{p.to}</strong></td>
                            <td>{p.weight_before} " → " {p.effective_weight}</td>
                            <td>{p.success_rate.map(|r| percent(r, 1)).unwrap_or_else(|| "–".into())}</td>
                            <td>{p.reason}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        }
        .into_any()
    };
    view! {
        <section class="card" aria-labelledby=labelled_by data-pool=key>
            <h2 id=heading>"In pool " <a href=format!("/pools/{}", pool.pool)><code>{pool.pool.clone()}</code></a></h2>
            <p>"Now " <strong>{pool.state.clone()}</strong> ", effective weight " {pool.effective_weight} " of " {pool.base_weight} "."</p>
            <Plot id title unit=Unit::Count("weight") series from_ms=start to_ms=now y_max=(pool.base_weight as f64).max(1.0) marks summary/>
            {rows}
        </section>
    }
}
