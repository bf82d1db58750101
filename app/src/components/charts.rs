//! Figures beside the charts of `plot`: deviation bars of actual against expected shares
//! (a table, each row with a bar), a strip of states, and numbers grouped for reading.
//! Each carries its numbers as text: a table around the bars, a word (and a symbol)
//! beside every colour.

use leptos::prelude::*;

use super::number::percent;

/// A count with thousands separated by commas (`52,000,000`), for tables of large numbers.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// One row of deviation bars: a member's expected and actual share (0..=1).
#[derive(Debug, Clone, PartialEq)]
pub struct ShareRow {
    pub member: String,
    pub expected: f64,
    /// `None`: no draws to measure.
    pub actual: Option<f64>,
    /// The member's draws and all draws the actual share is measured on.
    pub draws: Option<(u64, u64)>,
}

/// `+1.2 pp`, `−0.4 pp`: a deviation in percentage points, signed in words' stead.
fn points_text(deviation: f64) -> String {
    let pp = deviation * 100.0;
    if pp.abs() < 0.05 {
        "±0.0 pp".to_owned()
    } else if pp > 0.0 {
        format!("+{pp:.1} pp")
    } else {
        format!("−{:.1} pp", -pp)
    }
}

/// Actual against expected shares as a table: each row gives the numbers and a bar of the
/// deviation (right of the centre line: more than expected; left: less). The bars share
/// one scale, the largest deviation rounded up (at least ±5 pp), named in the caption.
#[component]
pub fn DeviationBars(id: String, caption: String, rows: Vec<ShareRow>) -> impl IntoView {
    let largest = rows.iter().filter_map(|r| r.actual.map(|a| (a - r.expected).abs())).fold(0.0f64, f64::max);
    let scale_pp = ((largest * 100.0 / 5.0).ceil() * 5.0).max(5.0);
    let measured = rows.iter().any(|r| r.actual.is_some());
    view! {
        <div class="table-scroll">
            <table class="grid deviation" id=id>
                <caption>
                    {caption}
                    <span class="detail">
                        {if measured {
                            format!(" (bars: actual minus expected, the full half-width is {scale_pp:.0} pp)")
                        } else {
                            " (no draws to measure yet)".to_owned()
                        }}
                    </span>
                </caption>
                <thead>
                    <tr>
                        <th scope="col">"Member"</th>
                        <th scope="col" class="num">"Expected"</th>
                        <th scope="col" class="num">"Actual"</th>
                        <th scope="col" class="num">"Deviation"</th>
                        <th scope="col" class="bar-col">"Bar"</th>
                    </tr>
                </thead>
                <tbody>
                    {rows.into_iter().map(|r| {
                        let deviation = r.actual.map(|a| a - r.expected);
                        let (sign, class) = match deviation {
                            None => ("", "none"),
                            Some(d) if d * 100.0 >= 0.05 => ("▲ ", "over"),
                            Some(d) if d * 100.0 <= -0.05 => ("▼ ", "under"),
                            Some(_) => ("", "even"),
                        };
                        let actual = match (r.actual, r.draws) {
                            (Some(a), Some((own, all))) => format!("{} ({own} of {all})", percent(a, 1)),
                            (Some(a), None) => percent(a, 1),
                            (None, _) => "—".to_owned(),
                        };
                        // Half the bar's width is `scale_pp` points.
                        let width = deviation.map_or(0.0, |d| (d * 100.0 / scale_pp).clamp(-1.0, 1.0) * 50.0);
                        let (bar_x, bar_w) = if width >= 0.0 { (50.0, width) } else { (50.0 + width, -width) };
                        let key = r.member.clone();
                        view! {
                            <tr
                                data-member=key
                                data-expected=format!("{:.4}", r.expected)
                                data-actual=r.actual.map(|a| format!("{a:.4}")).unwrap_or_default()
                            >
                                <th scope="row"><code>{r.member.clone()}</code></th>
                                <td class="num">{percent(r.expected, 1)}</td>
                                <td class="num">{actual}</td>
                                <td class=format!("num deviation-{class}")>
                                    {sign}{deviation.map(points_text).unwrap_or_else(|| "—".to_owned())}
                                </td>
                                <td class="bar-col">
                                    <svg class="deviation-bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true" focusable="false">
                                        <rect class="track" x="0" y="3" width="100" height="4"/>
                                        <rect class=format!("bar {class}") x=format!("{bar_x:.2}") y="1" width=format!("{bar_w:.2}") height="8"/>
                                        <line class="centre" x1="50" x2="50" y1="0" y2="10"/>
                                    </svg>
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// One entry of a state strip.
#[derive(Debug, Clone, PartialEq)]
pub struct StateItem {
    /// What the state is of (a channel).
    pub name: String,
    /// `healthy`, `decaying`, `ejected`, `recovering`, or anything else shown as is.
    pub state: String,
    /// Said after the state, e.g. "pinned" or "not drawn".
    pub note: Option<String>,
}

/// The symbol beside a state's word: shape and word carry it, colour only repeats it.
fn state_symbol(state: &str) -> &'static str {
    match state {
        "healthy" => "✓",
        "decaying" => "↘",
        "ejected" => "✕",
        "recovering" => "↗",
        _ => "?",
    }
}

/// The states of many things at a glance, each as a symbol, its name and its state in
/// words, in a list that wraps.
#[component]
pub fn StateStrip(id: String, label: String, items: Vec<StateItem>) -> impl IntoView {
    view! {
        <ul class="state-strip" id=id aria-label=label>
            {items.into_iter().map(|item| {
                let class = match item.state.as_str() {
                    "healthy" | "decaying" | "ejected" | "recovering" => format!("state state-{}", item.state),
                    _ => "state state-other".to_owned(),
                };
                let (name_key, state_key) = (item.name.clone(), item.state.clone());
                let symbol = state_symbol(&item.state);
                view! {
                    <li class=class data-name=name_key data-state=state_key>
                        <span class="symbol" aria-hidden="true">{symbol}</span>
                        " "<code>{item.name.clone()}</code>" "
                        <span class="state-word">{item.state.clone()}</span>
                        {item.note.map(|n| view! { <span class="detail">" (" {n} ")"</span> })}
                    </li>
                }
            }).collect_view()}
        </ul>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviations_are_signed_in_points_and_counts_grouped() {
        assert_eq!(points_text(0.0123), "+1.2 pp");
        assert_eq!(points_text(-0.004), "−0.4 pp");
        assert_eq!(points_text(0.0001), "±0.0 pp");
        assert_eq!(
            (grouped(0), grouped(999), grouped(1000), grouped(52_000_000)),
            ("0".into(), "999".into(), "1,000".into(), "52,000,000".into())
        );
    }
}
