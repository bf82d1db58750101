//! A channel's last hour of outcome reports, three charts on one time axis: success rate
//! per minute (each pool's threshold dashed, the health transitions numbered), outcomes per
//! minute (ok and failed stacked) and mean latency. The figures are also given in words.

use leptos::prelude::*;

use super::charts::grouped;
use super::plot::{Mark, Plot, Point, Rule, Series, Shape, Unit};
use crate::api::OutcomeMinute;

/// The three charts of `minutes` between `start` and `end` (ms since the epoch).
#[component]
pub fn OutcomeCharts(
    id: String,
    minutes: Vec<OutcomeMinute>,
    thresholds: Vec<Rule>,
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
            grouped(ok + fail),
            minutes.len(),
            ok as f64 * 100.0 / (ok + fail) as f64,
            if lat_n > 0.0 { format!(", mean latency {:.0} ms", lat_sum / lat_n) } else { String::new() }
        )
    };
    // A minute's rate and latency are drawn at its middle; its bar spans it.
    let mid = |m: &OutcomeMinute| m.at_ms + 30_000;
    let rate = Series {
        name: "success rate".to_owned(),
        shape: Shape::Line,
        tone: "accent",
        points: minutes
            .iter()
            .filter_map(|m| {
                m.success_rate().map(|r| Point { at_ms: mid(m), value: r, note: Some(format!("of {}", m.ok + m.fail)) })
            })
            .collect(),
    };
    let volume = |name: &str, tone: &'static str, count: fn(&OutcomeMinute) -> u64| Series {
        name: name.to_owned(),
        shape: Shape::Bars,
        tone,
        points: minutes.iter().map(|m| Point::new(m.at_ms, count(m) as f64)).collect(),
    };
    let latency = Series {
        name: "mean latency".to_owned(),
        shape: Shape::Line,
        tone: "c4",
        points: minutes.iter().filter_map(|m| m.latency_ms.map(|l| Point::new(mid(m), l))).collect(),
    };
    let none = "No outcome reported in the last hour.";
    // The thresholds in words too (the chart's labels are for the eye only).
    let rate_summary = if thresholds.is_empty() {
        summary.clone()
    } else {
        let each: Vec<String> = thresholds.iter().map(|t| t.label.clone()).collect();
        format!("{summary} Thresholds: {}.", each.join("; "))
    };
    let latency_summary = if lat_n > 0.0 {
        format!("Mean latency over the hour {:.0} ms.", lat_sum / lat_n)
    } else {
        "No latency reported.".to_owned()
    };
    let (minutes_count, marks_count) = (minutes.len().to_string(), marks.len().to_string());
    view! {
        <div class="outcome-charts" id=id.clone() data-minutes=minutes_count data-marks=marks_count>
            <p class="chart-summary">{summary.clone()}</p>
            <Plot
                id=format!("{id}-rate")
                title="Success rate per minute"
                unit=Unit::Percent
                series=vec![rate]
                from_ms=start
                to_ms=end
                rules=thresholds
                marks=marks.clone()
                summary=rate_summary
                empty=none
            />
            <Plot
                id=format!("{id}-volume")
                title="Outcomes per minute: ok below, failed above"
                unit=Unit::Count("outcomes")
                series=vec![volume("ok", "ok", |m| m.ok), volume("failed", "bad", |m| m.fail)]
                from_ms=start
                to_ms=end
                marks=marks.clone()
                summary=format!("{} ok and {} failed in the last hour.", grouped(ok), grouped(fail))
                empty=none
            />
            <Plot
                id=format!("{id}-latency")
                title="Mean latency per minute"
                unit=Unit::Millis
                series=vec![latency]
                from_ms=start
                to_ms=end
                marks
                summary=latency_summary
                empty="No latency reported in the last hour."
            />
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_without_outcomes_has_no_success_rate() {
        let m = OutcomeMinute { at_ms: 0, ok: 0, fail: 0, latency_ms: None };
        assert_eq!(m.success_rate(), None);
        let m = OutcomeMinute { at_ms: 0, ok: 20, fail: 80, latency_ms: Some(20.0) };
        assert_eq!(m.success_rate(), Some(0.2));
    }
}
