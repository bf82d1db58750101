//! The charts: one family (lines, steps, stacked bars) over a time axis, whose text is
//! HTML at the page's font size whatever the chart's width. Only the shapes are SVG, drawn
//! in a unit square stretched to the plot area (`preserveAspectRatio="none"`, strokes that
//! do not scale); axis ticks, unit titles, threshold labels, transition numbers and the
//! values shown on hover are HTML placed over it by percentages. Times read in the
//! viewer's local time once the page is hydrated (UTC before, and always on hover).
//!
//! Every chart has a caption, a summary in words, a legend, an empty state and (through
//! [`PlotLoading`]) a loading state; a hover band per time shows each series' value there.

use leptos::prelude::*;

use super::charts::grouped;
use super::time::civil_from_days;

/// The SVG's coordinate space: a square of this side, stretched to the plot area.
const UNIT: f64 = 1000.0;

/// The most hover bands a chart carries by default (more points share one band each): an
/// hour of minutes. Each band carries its values in the page, so a page of many charts
/// asks for fewer (`bands`).
pub const MAX_BANDS: usize = 60;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Points joined by straight lines.
    Line,
    /// A value held until the next point, then to the right edge.
    Step,
    /// A bar per point, `bar_ms` wide; bar series stack in their order.
    Bars,
}

/// One point: at a time (ms since the epoch), a value; `note` is said after it on hover.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub at_ms: i64,
    pub value: f64,
    pub note: Option<String>,
}

impl Point {
    pub fn new(at_ms: i64, value: f64) -> Self {
        Point { at_ms, value, note: None }
    }
}

/// One series: its name (in the legend and on hover), shape, colour class (`tone-*` in
/// the style sheet: accent, ok, bad, warn, c1 … c5) and points, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub shape: Shape,
    pub tone: &'static str,
    pub points: Vec<Point>,
}

/// A horizontal line at a value (a threshold), labelled at its right end.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub value: f64,
    pub label: String,
}

/// A moment marked by a vertical line and its number (1, 2, …); `label` on hover.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub at_ms: i64,
    pub label: String,
}

/// How values read on the value axis and on hover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A share 0..=1, read in percent.
    Percent,
    /// Milliseconds.
    Millis,
    /// A count of something, named (e.g. "tickets").
    Count(&'static str),
}

impl Unit {
    /// The axis title.
    fn title(self) -> &'static str {
        match self {
            Unit::Percent => "%",
            Unit::Millis => "ms",
            Unit::Count(what) => what,
        }
    }

    /// A value as a tick reads (short) and as hover reads (exact).
    fn tick(self, v: f64) -> String {
        match self {
            Unit::Percent => format!("{:.0} %", v * 100.0),
            Unit::Millis => format!("{} ms", compact(v)),
            Unit::Count(_) => compact(v),
        }
    }

    fn exact(self, v: f64) -> String {
        match self {
            Unit::Percent => format!("{:.1} %", v * 100.0),
            Unit::Millis => format!("{v:.0} ms"),
            Unit::Count(what) if v.fract() == 0.0 && v >= 0.0 => format!("{} {what}", grouped(v as u64)),
            Unit::Count(what) => format!("{v:.1} {what}"),
        }
    }
}

/// A tick value, short: 950, 1.5k, 20k, 2M.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if scaled.fract().abs() < 1e-9 {
        format!("{scaled:.0}{suffix}")
    } else if suffix.is_empty() && a < 10.0 {
        format!("{scaled:.1}")
    } else {
        format!("{scaled:.1}{suffix}")
    }
}

/// An axis maximum at or above `max` that reads well: 1, 2 or 5 times a power of ten (or
/// 1 for a share).
pub fn nice_max(max: f64, unit: Unit) -> f64 {
    if unit == Unit::Percent {
        return 1.0;
    }
    if max.is_nan() || max <= 0.0 {
        return 1.0;
    }
    let mut step = 10f64.powf(max.log10().floor());
    loop {
        for m in [1.0, 2.0, 5.0] {
            if step * m >= max - 1e-9 {
                return step * m;
            }
        }
        step *= 10.0;
    }
}

/// The time ticks of `from..=to`: multiples of a round step (1 min … 7 days) that give at
/// most five ticks.
pub fn time_ticks(from: i64, to: i64) -> Vec<i64> {
    const MIN: i64 = 60_000;
    let span = (to - from).max(1);
    let step = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080]
        .into_iter()
        .map(|m| m * MIN)
        .find(|s| span / s < 5)
        .unwrap_or(span);
    let first = (from + step - 1).div_euclid(step) * step;
    (0..).map(|k| first + k * step).take_while(|t| *t <= to).collect()
}

/// `HH:MM` (and `MM-DD` before it when `dated`) of a time: local in the browser once the
/// page is hydrated and `local` says so, UTC otherwise.
pub fn clock_text(at_ms: i64, local: bool, dated: bool) -> String {
    let (mo, d, h, mi) = if local { local_parts(at_ms) } else { utc_parts(at_ms) };
    if dated {
        format!("{mo:02}-{d:02} {h:02}:{mi:02}")
    } else {
        format!("{h:02}:{mi:02}")
    }
}

/// The exact UTC time, for hover: `2026-12-07 10:53:20 UTC`.
pub fn utc_text(at_ms: i64) -> String {
    let seconds = at_ms.div_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let s = seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", s / 3600, s % 3600 / 60, s % 60)
}

fn utc_parts(at_ms: i64) -> (i64, i64, i64, i64) {
    let seconds = at_ms.div_euclid(1000);
    let (_, m, d) = civil_from_days(seconds.div_euclid(86_400));
    let s = seconds.rem_euclid(86_400);
    (m, d, s / 3600, s % 3600 / 60)
}

#[cfg(feature = "hydrate")]
fn local_parts(at_ms: i64) -> (i64, i64, i64, i64) {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at_ms as f64));
    (
        i64::from(date.get_month()) + 1,
        i64::from(date.get_date()),
        i64::from(date.get_hours()),
        i64::from(date.get_minutes()),
    )
}

#[cfg(not(feature = "hydrate"))]
fn local_parts(at_ms: i64) -> (i64, i64, i64, i64) {
    utc_parts(at_ms)
}

/// `true` once the page is hydrated in a browser (then times read in local time); `false`
/// while rendering on the server and in the page as first sent.
fn hydrated_signal() -> ReadSignal<bool> {
    let (local, set_local) = signal(false);
    Effect::new(move |_| set_local.set(true));
    local
}

/// A percentage (an SVG length), from a position in the unit square.
fn pct(v: f64) -> String {
    format!("{:.2}%", v / UNIT * 100.0)
}

/// The chart. `from_ms..to_ms` is the time axis; `y_max` the value axis' top (`None`: a
/// round number at or above the largest value; a share always reaches 100 %); `bar_ms`
/// the width of a bar in time; `summary` the figures in words; `empty` what the plot says
/// without a point.
#[component]
pub fn Plot(
    id: String,
    #[prop(into)] title: String,
    unit: Unit,
    series: Vec<Series>,
    from_ms: i64,
    to_ms: i64,
    #[prop(optional)] y_max: Option<f64>,
    #[prop(optional)] rules: Vec<Rule>,
    #[prop(optional)] marks: Vec<Mark>,
    #[prop(default = 60_000)] bar_ms: i64,
    /// The most hover bands (see [`hover_bands`]).
    #[prop(default = MAX_BANDS)]
    bands: usize,
    #[prop(into)] summary: String,
    #[prop(into, default = "No data yet.".to_owned())] empty: String,
) -> impl IntoView {
    let local = hydrated_signal();
    let span = (to_ms - from_ms).max(1);
    let top = stack_top(&series);
    let y_max = y_max.unwrap_or_else(|| nice_max(top, unit)).max(f64::MIN_POSITIVE);
    let x = move |t: i64| (t.clamp(from_ms, to_ms) - from_ms) as f64 / span as f64 * UNIT;
    let y = move |v: f64| UNIT - (v / y_max).clamp(0.0, 1.0) * UNIT;
    let points: usize = series.iter().map(|s| s.points.len()).sum();
    let dated = span > 86_400_000;
    let caption_id = format!("{id}-caption");
    let summary_id = format!("{id}-summary");

    let grid = [0.0, y_max / 2.0, y_max];
    // Text is drawn in SVGs without a viewBox, placed by percentages of their box (and
    // offsets in em or px): it keeps the page's font size at any width, and needs no
    // inline style (the pages' Content-Security-Policy allows none).
    let y_ticks = grid
        .iter()
        .map(|v| {
            view! { <text class="plot-tick" x="100%" dx="-6" y=pct(y(*v)) dominant-baseline="middle" text-anchor="end">{unit.tick(*v)}</text> }
        })
        .collect_view();
    let gridlines = grid
        .iter()
        .map(|v| {
            let gy = format!("{:.1}", y(*v));
            view! { <line class="plot-grid" x1="0" x2=UNIT y1=gy.clone() y2=gy vector-effect="non-scaling-stroke"/> }
        })
        .collect_view();
    let x_ticks = time_ticks(from_ms, to_ms)
        .into_iter()
        .map(|t| {
            let at = x(t);
            // A label centred on a tick this near an edge would stick out of a phone-wide
            // chart (some 300 px: a dated label is about 70 px wide, an hour's 35).
            let edge = if dated { 200.0 } else { 120.0 };
            let anchor = if at < edge {
                "start"
            } else if at > UNIT - edge {
                "end"
            } else {
                "middle"
            };
            view! {
                <text class="plot-tick" x=pct(at) y="0" dy="1.1em" text-anchor=anchor data-at=t.to_string()>
                    <title>{utc_text(t)}</title>
                    {move || clock_text(t, local.get(), dated)}
                </text>
            }
        })
        .collect_view();

    // The shapes, bars first (under the lines).
    let bar_w = (bar_ms as f64 / span as f64 * UNIT * 0.8).max(1.0);
    let mut stacked: std::collections::BTreeMap<i64, f64> = std::collections::BTreeMap::new();
    let mut shapes = Vec::new();
    for s in series.iter().filter(|s| s.shape == Shape::Bars) {
        for p in &s.points {
            let base = stacked.entry(p.at_ms).or_insert(0.0);
            let (y0, y1) = (y(*base), y(*base + p.value));
            *base += p.value;
            let bx = x(p.at_ms + bar_ms / 2) - bar_w / 2.0;
            shapes.push(
                view! {
                    <rect class=format!("plot-bar tone-{}", s.tone) x=format!("{bx:.1}") y=format!("{y1:.1}")
                        width=format!("{bar_w:.1}") height=format!("{:.1}", (y0 - y1).max(0.0))/>
                }
                .into_any(),
            );
        }
    }
    for s in series.iter().filter(|s| s.shape != Shape::Bars) {
        let mut line: Vec<(f64, f64)> = Vec::with_capacity(s.points.len() * 2 + 1);
        for p in &s.points {
            if s.shape == Shape::Step {
                if let Some(&(_, prev)) = line.last() {
                    line.push((x(p.at_ms), prev));
                }
            }
            line.push((x(p.at_ms), y(p.value)));
        }
        if s.shape == Shape::Step {
            if let Some(&(_, last)) = line.last() {
                line.push((UNIT, last));
            }
        }
        // A single point is a short dash, so that it shows.
        if let [(px, py)] = line[..] {
            line = vec![((px - 4.0).max(0.0), py), ((px + 4.0).min(UNIT), py)];
        }
        let drawn: Vec<String> = line.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        shapes.push(
            view! {
                <polyline class=format!("plot-line tone-{}", s.tone) points=drawn.join(" ") fill="none"
                    vector-effect="non-scaling-stroke" data-series=s.name.clone()/>
            }
            .into_any(),
        );
    }
    let rule_lines = rules
        .iter()
        .map(|r| {
            let ry = format!("{:.1}", y(r.value));
            view! { <line class="plot-rule" x1="0" x2=UNIT y1=ry.clone() y2=ry vector-effect="non-scaling-stroke"/> }
        })
        .collect_view();
    let rule_labels = rules
        .iter()
        .map(|r| {
            // Above the line, or below it when the line is near the top.
            let at = y(r.value);
            let dy = if at < 120.0 { "1.1em" } else { "-0.35em" };
            view! { <text class="plot-rule-label" x="100%" dx="-4" y=pct(at) dy=dy text-anchor="end">{r.label.clone()}</text> }
        })
        .collect_view();
    let mark_lines = marks
        .iter()
        .map(|m| {
            let mx = format!("{:.1}", x(m.at_ms));
            view! { <line class="plot-mark-line" x1=mx.clone() x2=mx y1="0" y2=UNIT vector-effect="non-scaling-stroke"/> }
        })
        .collect_view();
    let mark_labels = marks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let at = x(m.at_ms);
            let title = format!("{}: {} ({})", i + 1, m.label, utc_text(m.at_ms));
            let (anchor, dx) = if at > UNIT - 30.0 { ("end", "-3") } else { ("start", "3") };
            view! {
                <text class="plot-mark" x=pct(at) dx=dx y="0" dy="1.1em" text-anchor=anchor data-label=m.label.clone()>
                    <title>{title}</title>
                    {(i + 1).to_string()}
                </text>
            }
        })
        .collect_view();
    let bands = hover_bands(&series, from_ms, to_ms, bar_ms, bands)
        .into_iter()
        .map(|band| {
            let (left, right) = (x(band.from), x(band.to));
            // The values open towards the wider side, in a box from the band to that edge.
            let (tip_x, tip_w, side) = if left + right < UNIT {
                (pct(left), pct(UNIT - left), "plot-tip tip-right")
            } else {
                ("0%".to_owned(), pct(right), "plot-tip tip-left")
            };
            let at = band.at_ms;
            let lines = band.values.iter().map(|(name, value, note)| {
                let text = format!("{name}: {}{}", unit.exact(*value), note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default());
                view! { <span class="plot-tip-line">{text}</span> }
            }).collect_view();
            view! {
                <g class="plot-band" data-at=at.to_string()>
                    <rect class="plot-band-area" x=pct(left) y="0" width=pct((right - left).max(1.0)) height="100%"/>
                    <foreignObject class=side x=tip_x y="0" width=tip_w height="100%">
                        <div class="plot-tip-box">
                            <span class="plot-tip-time">{move || clock_text(at, local.get(), true)}" · "{utc_text(at)}</span>
                            {lines}
                        </div>
                    </foreignObject>
                </g>
            }
        })
        .collect_view();
    let legend = series
        .iter()
        .map(|s| view! { <li><span class=format!("swatch tone-{}", s.tone) aria-hidden="true"></span>{s.name.clone()}</li> })
        .collect_view();
    let rules_legend = (!rules.is_empty())
        .then(|| view! { <li><span class="swatch swatch-rule" aria-hidden="true"></span>"dashed: thresholds"</li> });
    let marks_legend = (!marks.is_empty())
        .then(|| view! { <li><span class="swatch swatch-mark" aria-hidden="true"></span>"numbered: transitions"</li> });
    let empty_note = (points == 0).then(|| view! { <p class="plot-empty">{empty}</p> });
    let series_count = series.len().to_string();
    let (marks_count, rules_count, points_count) =
        (marks.len().to_string(), rules.len().to_string(), points.to_string());
    let (labelled_by, described_by) = (caption_id.clone(), summary_id.clone());
    let svg_points = points_count.clone();
    view! {
        <figure class="plot" id=id data-points=points_count data-series=series_count
            data-marks=marks_count data-rules=rules_count data-y-max=format!("{y_max}")
            aria-labelledby=labelled_by aria-describedby=described_by>
            <figcaption id=caption_id>{title}</figcaption>
            <div class="plot-frame">
                <span class="plot-axis-title plot-y-title">{unit.title()}</span>
                <svg class="plot-y" aria-hidden="true" focusable="false">{y_ticks}</svg>
                <div class="plot-area">
                    <svg class="plot-shapes" viewBox=format!("0 0 {UNIT} {UNIT}") preserveAspectRatio="none" aria-hidden="true" focusable="false"
                        data-points=svg_points>
                        {gridlines}
                        {rule_lines}
                        {mark_lines}
                        {shapes}
                    </svg>
                    <svg class="plot-overlay" aria-hidden="true" focusable="false">
                        {rule_labels}
                        {mark_labels}
                        {bands}
                    </svg>
                    {empty_note}
                </div>
                <svg class=if dated { "plot-x dated" } else { "plot-x" } aria-hidden="true" focusable="false">{x_ticks}</svg>
                <span class="plot-axis-title plot-x-title">
                    {move || if local.get() { "time (your local time; UTC on hover)" } else { "time (UTC)" }}
                </span>
            </div>
            <ul class="legend">{legend}{rules_legend}{marks_legend}</ul>
            <p class="chart-summary" id=summary_id>{summary}</p>
        </figure>
    }
}

/// The chart's place while its data loads: the same frame, saying so.
#[component]
pub fn PlotLoading(#[prop(into)] title: String) -> impl IntoView {
    view! {
        <figure class="plot plot-loading" aria-busy="true">
            <figcaption>{title}</figcaption>
            <div class="plot-frame">
                <div class="plot-area"><p class="plot-empty">"Loading…"</p></div>
            </div>
        </figure>
    }
}

/// The highest value the chart holds: a line's point or a stack of bars.
fn stack_top(series: &[Series]) -> f64 {
    let mut stacks: std::collections::BTreeMap<i64, f64> = std::collections::BTreeMap::new();
    let mut top = 0.0f64;
    for s in series {
        for p in &s.points {
            if s.shape == Shape::Bars {
                let v = stacks.entry(p.at_ms).or_insert(0.0);
                *v += p.value;
                top = top.max(*v);
            } else {
                top = top.max(p.value);
            }
        }
    }
    top
}

/// A time's hover band: `from..to` on the axis, and each series' value there.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub at_ms: i64,
    pub from: i64,
    pub to: i64,
    pub values: Vec<(String, f64, Option<String>)>,
}

/// One band per distinct time (a bar's at its middle), at most `most`: beyond, the
/// newest point of each run of neighbours speaks for it. Bands meet halfway between times.
pub fn hover_bands(series: &[Series], from_ms: i64, to_ms: i64, bar_ms: i64, most: usize) -> Vec<Band> {
    let most = most.max(1);
    let mut times: Vec<i64> = series
        .iter()
        .flat_map(|s| {
            let shift = if s.shape == Shape::Bars { bar_ms / 2 } else { 0 };
            s.points.iter().map(move |p| p.at_ms + shift)
        })
        .filter(|t| (from_ms..=to_ms).contains(t))
        .collect();
    times.sort_unstable();
    times.dedup();
    if times.len() > most {
        let every = times.len().div_ceil(most);
        let newest = *times.last().unwrap_or(&to_ms);
        let mut kept: Vec<i64> = times.iter().copied().rev().step_by(every).collect();
        kept.reverse();
        debug_assert_eq!(kept.last(), Some(&newest));
        times = kept;
    }
    let value_at = |s: &Series, t: i64| -> Option<(f64, Option<String>)> {
        match s.shape {
            Shape::Bars => s.points.iter().find(|p| p.at_ms + bar_ms / 2 == t).map(|p| (p.value, p.note.clone())),
            Shape::Line => s.points.iter().find(|p| p.at_ms == t).map(|p| (p.value, p.note.clone())),
            // A step's value holds: the newest point at or before the time.
            Shape::Step => s.points.iter().rev().find(|p| p.at_ms <= t).map(|p| (p.value, p.note.clone())),
        }
    };
    (0..times.len())
        .map(|i| {
            let t = times[i];
            let from = if i == 0 { from_ms } else { (times[i - 1] + t) / 2 };
            let to = if i + 1 == times.len() { to_ms } else { (t + times[i + 1]) / 2 };
            let values =
                series.iter().filter_map(|s| value_at(s, t).map(|(v, note)| (s.name.clone(), v, note))).collect();
            Band { at_ms: t, from, to, values }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_axes_reach_past_the_data() {
        assert_eq!(nice_max(0.0, Unit::Count("x")), 1.0);
        assert_eq!(nice_max(7.0, Unit::Count("x")), 10.0);
        assert_eq!(nice_max(1024.0, Unit::Count("x")), 2000.0);
        assert_eq!(nice_max(2000.0, Unit::Count("x")), 2000.0);
        assert_eq!(nice_max(0.3, Unit::Millis), 0.5);
        assert_eq!(nice_max(0.3, Unit::Percent), 1.0);
        assert_eq!(
            (compact(950.0), compact(1500.0), compact(20_000.0), compact(2e6)),
            ("950".into(), "1500".into(), "20k".into(), "2M".into())
        );
        assert_eq!(compact(2.5), "2.5");
    }

    #[test]
    fn an_hour_has_a_tick_every_fifteen_minutes_on_the_quarter() {
        let from = 1_796_223_840_000; // 2026-12-02 15:04 UTC
        let ticks = time_ticks(from, from + 3_600_000);
        assert_eq!(
            ticks.iter().map(|t| clock_text(*t, false, false)).collect::<Vec<_>>(),
            ["15:15", "15:30", "15:45", "16:00"]
        );
        assert!(time_ticks(from, from + 7 * 86_400_000).len() <= 5);
        assert_eq!(utc_text(from), "2026-12-02 15:04:00 UTC");
        assert_eq!(clock_text(from, false, true), "12-02 15:04");
    }

    #[test]
    fn bands_meet_halfway_and_hold_a_steps_value() {
        let series = vec![
            Series {
                name: "a".into(),
                shape: Shape::Line,
                tone: "accent",
                points: vec![Point::new(0, 1.0), Point::new(100, 2.0)],
            },
            Series { name: "w".into(), shape: Shape::Step, tone: "c1", points: vec![Point::new(0, 5.0)] },
        ];
        let bands = hover_bands(&series, 0, 200, 60_000, MAX_BANDS);
        assert_eq!(bands.len(), 2);
        assert_eq!((bands[0].from, bands[0].to, bands[1].from, bands[1].to), (0, 50, 50, 200));
        assert_eq!(bands[1].values, vec![("a".into(), 2.0, None), ("w".into(), 5.0, None)]);
        let many = vec![Series {
            name: "n".into(),
            shape: Shape::Line,
            tone: "accent",
            points: (0..361).map(|i| Point::new(i * 10, i as f64)).collect(),
        }];
        let bands = hover_bands(&many, 0, 3600, 0, MAX_BANDS);
        assert!(bands.len() <= MAX_BANDS);
        assert!(hover_bands(&many, 0, 3600, 0, 30).len() <= 30);
        assert_eq!(bands.last().unwrap().at_ms, 3600, "the newest point keeps its band");
    }

    #[test]
    fn stacked_bars_reach_their_sum() {
        let bars = |name: &str, v: f64| Series {
            name: name.into(),
            shape: Shape::Bars,
            tone: "ok",
            points: vec![Point::new(0, v), Point::new(60_000, 1.0)],
        };
        assert_eq!(stack_top(&[bars("ok", 120.0), bars("failed", 80.0)]), 200.0);
    }
}
