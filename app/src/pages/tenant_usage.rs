//! A tenant's use as its page shows it: per bucket now (a bar and the same in words), and
//! this month per day from the usage ledger.

use leptos::prelude::*;

use crate::api::{DayUsage, UsageView};
use crate::components::charts::grouped;

#[component]
pub(super) fn Usage(tenant: String, usage: UsageView) -> impl IntoView {
    view! {
        <p>
            "Period " <strong>{usage.period}</strong> ": " {grouped(usage.requests_today)} " of " {grouped(usage.daily_requests)}
            " requests today, " <strong id=format!("leases-{tenant}")>{usage.leases}</strong> " of " {grouped(usage.concurrency)}
            " reservations open, " {grouped(usage.available)} " tokens available now."
        </p>
        <p class="notice">"In each bar the dark part is used, the lighter part reserved and the empty part free; the numbers say the same."</p>
        <table class="grid" id=format!("usage-{tenant}")>
            <thead>
                <tr>
                    <th scope="col">"Bucket"</th>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Tokens"</th>
                    <th scope="col">"Used"</th>
                    <th scope="col">"Reserved"</th>
                    <th scope="col">"Use"</th>
                    <th scope="col">"Live"</th>
                </tr>
            </thead>
            <tbody>
                {usage.buckets.into_iter().map(|b| {
                    let key = b.id.clone();
                    let meter = format!("meter-{tenant}-{}", b.id);
                    view! {
                        <tr data-bucket=key>
                            <td><code>{b.id}</code></td>
                            <td>{b.kind}</td>
                            <td class="number">{grouped(b.amount)}</td>
                            <td class="number">{grouped(b.used)}</td>
                            <td class="number">{grouped(b.reserved)}</td>
                            <td><Meter text_id=meter amount=b.amount used=b.used reserved=b.reserved/></td>
                            <td>{if b.live { "yes" } else { "no (not started or expired)" }}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// The month's tokens per UTC day from the usage ledger: one bar per day with use (its
/// height relative to the busiest day), each titled with its figures, and the total in words.
#[component]
pub(super) fn MonthChart(tenant: String, days: Vec<DayUsage>) -> impl IntoView {
    if days.is_empty() {
        return view! { <p class="notice" id=format!("month-{tenant}")>"No use recorded this month yet."</p> }
            .into_any();
    }
    let busiest = days.iter().map(|d| d.tokens).max().unwrap_or(0).max(1);
    let total: u64 = days.iter().map(|d| d.tokens).sum();
    let settled: u64 = days.iter().map(|d| d.settled).sum();
    let (width, height, gap) = (24.0_f64, 80.0_f64, 4.0_f64);
    let svg_width = days.len() as f64 * (width + gap);
    let summary =
        format!("{} tokens over {} settled requests on {} day(s)", grouped(total), grouped(settled), days.len());
    view! {
        <figure class="month-chart" id=format!("month-{tenant}")>
            <svg role="img" aria-label=summary.clone() width=format!("{svg_width:.0}") height=format!("{:.0}", height + 16.0)
                viewBox=format!("0 0 {svg_width:.0} {:.0}", height + 16.0)>
                {days.into_iter().enumerate().map(|(i, d)| {
                    let h = (d.tokens as f64 / busiest as f64 * height).max(1.0);
                    let x = i as f64 * (width + gap);
                    let label = d.day.get(8..).unwrap_or(&d.day).to_owned();
                    view! {
                        <g class="month-day" data-day=d.day.clone() data-tokens=d.tokens>
                            <title>{format!("{}: {} tokens, {} settled", d.day, grouped(d.tokens), grouped(d.settled))}</title>
                            <rect x=format!("{x:.1}") y=format!("{:.1}", height - h) width=format!("{width:.0}") height=format!("{h:.1}")></rect>
                            <text x=format!("{:.1}", x + width / 2.0) y=format!("{:.0}", height + 12.0) text-anchor="middle">{label}</text>
                        </g>
                    }
                }).collect_view()}
            </svg>
            <figcaption>{summary}</figcaption>
        </figure>
    }
    .into_any()
}

/// A bucket's use as a bar (used solid, reserved striped) with the same in words.
#[component]
fn Meter(text_id: String, amount: u64, used: u64, reserved: u64) -> impl IntoView {
    let share = |part: u64| if amount == 0 { 0.0 } else { (part as f64 * 100.0 / amount as f64).min(100.0) };
    let used_share = share(used);
    let reserved_share = share(reserved).min(100.0 - used_share);
    let free = amount.saturating_sub(used.saturating_add(reserved));
    view! {
        <svg class="meter" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true">
            <rect class="meter-used" x="0" y="0" width=format!("{used_share:.2}") height="8"></rect>
            <rect class="meter-reserved" x=format!("{used_share:.2}") y="0" width=format!("{reserved_share:.2}") height="8"></rect>
        </svg>
        <span class="meter-text" id=text_id>{format!("{} used + {} reserved of {}; {} free", grouped(used), grouped(reserved), grouped(amount), grouped(free))}</span>
    }
    .into_any()
}
