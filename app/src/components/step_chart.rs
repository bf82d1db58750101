//! A step chart in plain SVG: a value that holds until it changes (a channel's effective
//! weight between health transitions), with each change marked and labelled. Scales with
//! its container (viewBox); the numbers are also given as text beside it by the caller.

use leptos::prelude::*;

/// One change: at `x` (ms since the epoch) the value became `after`; `label` names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub x: i64,
    pub before: f64,
    pub after: f64,
    pub label: String,
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 180.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// The line's points: the value before the first step from `start`, then a horizontal and
/// a vertical segment per step, held until `end`. Without steps the value has been
/// `current` throughout: a flat line at it.
pub fn step_points(steps: &[Step], start: i64, end: i64, y_max: f64, current: f64) -> Vec<(f64, f64)> {
    let span = (end - start).max(1) as f64;
    let x = |t: i64| LEFT + (t.clamp(start, end) - start) as f64 / span * (WIDTH - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - (v / y_max.max(1.0)).clamp(0.0, 1.0)) * (HEIGHT - TOP - BOTTOM);
    let mut points = Vec::with_capacity(steps.len() * 2 + 2);
    let first = steps.first().map(|s| s.before).unwrap_or(current);
    points.push((x(start), y(first)));
    for s in steps {
        points.push((x(s.x), y(s.before)));
        points.push((x(s.x), y(s.after)));
    }
    let last = steps.last().map(|s| s.after).unwrap_or(first);
    points.push((x(end), y(last)));
    points
}

/// The chart. `title` is read by screen readers; `id` identifies it to tests; the time axis
/// is labelled at both ends, relative to its right edge ("62 min ago" … "now").
#[component]
pub fn StepChart(
    id: String,
    title: String,
    steps: Vec<Step>,
    start: i64,
    end: i64,
    y_max: f64,
    /// The value now (the line when nothing changed).
    current: f64,
) -> impl IntoView {
    let ago = (end - start).max(0) / 60_000;
    let start_label = if ago >= 120 { format!("{} h ago", ago / 60) } else { format!("{ago} min ago") };
    let points = step_points(&steps, start, end, y_max, current);
    let path = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ");
    let span = (end - start).max(1) as f64;
    let marker_x = move |t: i64| LEFT + (t.clamp(start, end) - start) as f64 / span * (WIDTH - LEFT - RIGHT);
    let marker_y = move |v: f64| TOP + (1.0 - (v / y_max.max(1.0)).clamp(0.0, 1.0)) * (HEIGHT - TOP - BOTTOM);
    let title_id = format!("{id}-title");
    let labelled_by = title_id.clone();
    let n = |v: f64| format!("{v:.1}");
    let axis_y = n(HEIGHT - BOTTOM);
    let steps_count = steps.len().to_string();
    view! {
        <svg class="chart step-chart" id=id viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" aria-labelledby=labelled_by
            data-steps=steps_count preserveAspectRatio="xMidYMid meet">
            <title id=title_id>{title}</title>
            <line class="axis" x1=n(LEFT) y1=n(TOP) x2=n(LEFT) y2=axis_y.clone()/>
            <line class="axis" x1=n(LEFT) y1=axis_y.clone() x2=n(WIDTH - RIGHT) y2=axis_y.clone()/>
            <text class="tick" x=n(LEFT - 6.0) y=n(TOP + 4.0) text-anchor="end">{format!("{y_max:.0}")}</text>
            <text class="tick" x=n(LEFT - 6.0) y=axis_y.clone() text-anchor="end">"0"</text>
            <text class="tick" x=n(LEFT) y=n(HEIGHT - 8.0) text-anchor="start">{start_label}</text>
            <text class="tick" x=n(WIDTH - RIGHT) y=n(HEIGHT - 8.0) text-anchor="end">"now"</text>
            <polyline class="series" points=path fill="none"/>
            {steps.into_iter().enumerate().map(|(i, s)| {
                let (cx, cy) = (marker_x(s.x), marker_y(s.after));
                // Markers carry a number (as in the table beside the chart), never colour alone.
                view! {
                    <g class="marker">
                        <line class="marker-line" x1=n(cx) y1=n(TOP) x2=n(cx) y2=axis_y.clone()/>
                        <circle cx=n(cx) cy=n(cy) r="4"><title>{s.label.clone()}</title></circle>
                        <text class="marker-label" x=n(cx + 3.0) y=n(TOP + 10.0)>{(i + 1).to_string()}</text>
                    </g>
                }
            }).collect_view()}
        </svg>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_holds_its_value_until_the_next_and_to_the_end() {
        let steps = vec![
            Step { x: 50, before: 10.0, after: 5.0, label: "decaying".into() },
            Step { x: 75, before: 5.0, after: 0.0, label: "ejected".into() },
        ];
        let p = step_points(&steps, 0, 100, 10.0, 0.0);
        assert_eq!(p.len(), 6);
        // Starts at the value before the first step, at the top (10 of 10).
        assert_eq!(p[0], (LEFT, TOP));
        // Vertical segments at each step; the last value held to the right edge, at zero.
        assert_eq!(p[1].0, p[2].0);
        assert_eq!(p[3].0, p[4].0);
        assert_eq!(p[5], (WIDTH - RIGHT, HEIGHT - BOTTOM));
    }

    #[test]
    fn without_steps_the_line_is_flat_at_the_current_value() {
        let p = step_points(&[], 0, 100, 30.0, 30.0);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].1, p[1].1);
        assert_eq!(p[0].1, TOP, "30 of 30: at the top, not at zero");
    }
}
