//! A channel's last hour of outcome reports in plain SVG, one time axis for three charts:
//! success rate per minute (with each pool's threshold dashed and the health transitions
//! marked and numbered), volume per minute (bars: ok and failed), and mean latency. The
//! figures are also given in words beside them.

use leptos::prelude::*;

use super::number::percent;
use crate::api::OutcomeMinute;

const WIDTH: f64 = 640.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 20.0;

/// A threshold to draw: its label and success rate (0..1).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub label: String,
    pub rate: f64,
}

/// A transition to mark: when, and what it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at_ms: i64,
    pub label: String,
}

/// The x of a time on the shared axis `start..end`.
pub fn x_of(at_ms: i64, start: i64, end: i64) -> f64 {
    let span = (end - start).max(1) as f64;
    LEFT + (at_ms.clamp(start, end) - start) as f64 / span * (WIDTH - LEFT - RIGHT)
}

fn y_of(value: f64, max: f64, height: f64) -> f64 {
    TOP + (1.0 - (value / max.max(f64::MIN_POSITIVE)).clamp(0.0, 1.0)) * (height - TOP - BOTTOM)
}

fn n(v: f64) -> String {
    format!("{v:.1}")
}

/// The three charts of `minutes` between `start` and `end` (ms since the epoch).
#[component]
pub fn OutcomeCharts(
    id: String,
    minutes: Vec<OutcomeMinute>,
    thresholds: Vec<Threshold>,
    marks: Vec<Mark>,
    start: i64,
    end: i64,
) -> impl IntoView {
    let (ok, fail): (u64, u64) = minutes.iter().fold((0, 0), |(o, f), m| (o + m.ok, f + m.fail));
    let (lat_sum, lat_n) = minutes
        .iter()
        .filter_map(|m| m.latency_ms.map(|l| (l * (m.ok + m.fail) as f64, (m.ok + m.fail) as f64)))
        .fold((0.0, 0.0), |(s, c), (l, k)| (s + l, c + k));
    let summary = if ok + fail == 0 {
        "No outcome reported in the last hour.".to_owned()
    } else {
        format!(
            "Last hour: {} outcomes in {} minutes with reports, {:.1} % successful{}.",
            crate::components::charts::grouped(ok + fail),
            minutes.len(),
            ok as f64 * 100.0 / (ok + fail) as f64,
            if lat_n > 0.0 { format!(", mean latency {:.0} ms", lat_sum / lat_n) } else { String::new() }
        )
    };
    let x = move |t: i64| x_of(t, start, end);
    // Each minute is drawn at its middle.
    let mid = |m: &OutcomeMinute| m.at_ms + 30_000;
    let axis = move |height: f64| {
        let base = n(height - BOTTOM);
        view! {
            <line class="axis" x1=n(LEFT) y1=n(TOP) x2=n(LEFT) y2=base.clone()/>
            <line class="axis" x1=n(LEFT) y1=base.clone() x2=n(WIDTH - RIGHT) y2=base/>
            <text class="tick" x=n(LEFT) y=n(height - 4.0) text-anchor="start">"60 min ago"</text>
            <text class="tick" x=n(WIDTH - RIGHT) y=n(height - 4.0) text-anchor="end">"now"</text>
        }
    };
    let markers = move |height: f64, marks: &[Mark]| {
        marks
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let cx = x(m.at_ms);
                view! {
                    <g class="marker">
                        <line class="marker-line" x1=n(cx) y1=n(TOP) x2=n(cx) y2=n(height - BOTTOM)/>
                        <text class="marker-label" x=n(cx + 3.0) y=n(TOP + 10.0)>{(i + 1).to_string()}<title>{m.label.clone()}</title></text>
                    </g>
                }
            })
            .collect_view()
    };

    // Success rate, 0..100 %.
    let h1 = 160.0;
    let rate_points: Vec<String> = minutes
        .iter()
        .filter_map(|m| m.success_rate().map(|r| format!("{},{}", n(x(mid(m))), n(y_of(r, 1.0, h1)))))
        .collect();
    let dots = minutes
        .iter()
        .filter_map(|m| {
            m.success_rate().map(|r| {
                let label = format!("{:.1} % of {} at {}", r * 100.0, m.ok + m.fail, crate::components::charts::clock(m.at_ms));
                view! { <circle class="point" cx=n(x(mid(m))) cy=n(y_of(r, 1.0, h1)) r="2.5"><title>{label}</title></circle> }
            })
        })
        .collect_view();
    let threshold_lines = thresholds
        .iter()
        .map(|t| {
            let y = n(y_of(t.rate, 1.0, h1));
            let label = format!("{} threshold {}", t.label, percent(t.rate, 1));
            view! {
                <g class="threshold">
                    <line x1=n(LEFT) y1=y.clone() x2=n(WIDTH - RIGHT) y2=y.clone() stroke-dasharray="6 4"/>
                    <text class="tick" x=n(WIDTH - RIGHT - 2.0) y=n(y_of(t.rate, 1.0, h1) - 3.0) text-anchor="end">{label.clone()}</text>
                    <title>{label}</title>
                </g>
            }
        })
        .collect_view();

    // Volume: ok stacked under failed, per minute.
    let h2 = 110.0;
    let busiest = minutes.iter().map(|m| m.ok + m.fail).max().unwrap_or(0).max(1) as f64;
    let bar_w = (WIDTH - LEFT - RIGHT) / 60.0 * 0.8;
    let bars = minutes
        .iter()
        .map(|m| {
            let bx = x(mid(m)) - bar_w / 2.0;
            let base = h2 - BOTTOM;
            let ok_top = y_of(m.ok as f64, busiest, h2);
            let all_top = y_of((m.ok + m.fail) as f64, busiest, h2);
            let label = format!("{}: {} ok, {} failed", crate::components::charts::clock(m.at_ms), m.ok, m.fail);
            view! {
                <g class="volume" data-ok=m.ok data-fail=m.fail>
                    <rect class="ok" x=n(bx) y=n(ok_top) width=n(bar_w) height=n(base - ok_top)/>
                    <rect class="fail" x=n(bx) y=n(all_top) width=n(bar_w) height=n(ok_top - all_top)/>
                    <title>{label}</title>
                </g>
            }
        })
        .collect_view();

    // Mean latency.
    let h3 = 110.0;
    let slowest = minutes.iter().filter_map(|m| m.latency_ms).fold(0.0, f64::max).max(1.0);
    let latency_points: Vec<String> = minutes
        .iter()
        .filter_map(|m| m.latency_ms.map(|l| format!("{},{}", n(x(mid(m))), n(y_of(l, slowest, h3)))))
        .collect();

    let marks_count = marks.len().to_string();
    let minutes_count = minutes.len().to_string();
    view! {
        <figure class="outcome-charts" id=id.clone() data-minutes=minutes_count data-marks=marks_count.clone()>
            <figcaption>{summary.clone()}</figcaption>
            <svg class="chart" id=format!("{id}-rate") viewBox=format!("0 0 {WIDTH} {h1}") role="img" aria-label=format!("Success rate per minute. {summary}")>
                <title>"Success rate per minute, last hour (0–100 %), thresholds dashed, health transitions numbered"</title>
                {axis(h1)}
                <text class="tick" x=n(LEFT - 6.0) y=n(TOP + 4.0) text-anchor="end">"100 %"</text>
                <text class="tick" x=n(LEFT - 6.0) y=n(h1 - BOTTOM) text-anchor="end">"0 %"</text>
                {threshold_lines}
                <polyline class="series" points=rate_points.join(" ") fill="none"/>
                {dots}
                {markers(h1, &marks)}
            </svg>
            <svg class="chart" id=format!("{id}-volume") viewBox=format!("0 0 {WIDTH} {h2}") role="img" aria-label="Outcomes per minute: ok below, failed above">
                <title>"Outcomes per minute, last hour: ok (dark) below failed (light)"</title>
                {axis(h2)}
                <text class="tick" x=n(LEFT - 6.0) y=n(TOP + 4.0) text-anchor="end">{format!("{busiest:.0}")}</text>
                {bars}
                {markers(h2, &marks)}
            </svg>
            <svg class="chart" id=format!("{id}-latency") viewBox=format!("0 0 {WIDTH} {h3}") role="img" aria-label="Mean latency per minute">
                <title>"Mean latency per minute, last hour (ms)"</title>
                {axis(h3)}
                <text class="tick" x=n(LEFT - 6.0) y=n(TOP + 4.0) text-anchor="end">{format!("{slowest:.0} ms")}</text>
                <polyline class="series" points=latency_points.join(" ") fill="none"/>
                {markers(h3, &marks)}
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_axis_runs_from_start_to_end_and_clamps_outside() {
        assert_eq!(x_of(0, 0, 100), LEFT);
        assert_eq!(x_of(100, 0, 100), WIDTH - RIGHT);
        assert_eq!(x_of(200, 0, 100), WIDTH - RIGHT);
        assert_eq!(x_of(-5, 0, 100), LEFT);
    }

    #[test]
    fn a_minute_without_outcomes_has_no_success_rate() {
        let m = OutcomeMinute { at_ms: 0, ok: 0, fail: 0, latency_ms: None };
        assert_eq!(m.success_rate(), None);
        let m = OutcomeMinute { at_ms: 0, ok: 20, fail: 80, latency_ms: Some(20.0) };
        assert_eq!(m.success_rate(), Some(0.2));
    }
}
