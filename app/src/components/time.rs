//! A moment as people read it at a glance ("5 min ago", "in 2 h"), with the exact time on
//! hover and in the `datetime` attribute.

use leptos::prelude::*;

/// Milliseconds since 1970 in UTC of `at`, and whether `at` named its zone:
/// `YYYY-MM-DD HH:MM[:SS[.fff]]` followed by nothing (UTC, not named), ` UTC` or `Z`, or
/// RFC 3339 with an offset; `None` for anything else.
pub fn parse_utc(at: &str) -> Option<(i64, bool)> {
    let at = at.trim();
    let number = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let (date, rest) = (at.get(..10)?, at.get(10..)?);
    if date.as_bytes()[4] != b'-' || date.as_bytes()[7] != b'-' {
        return None;
    }
    let (y, m, d) = (number(&date[..4])?, number(&date[5..7])?, number(&date[8..])?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    let rest = rest.strip_prefix(['T', ' '])?;
    let (clock, zone) = match rest.find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.')) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let zone = zone.trim();
    let offset_minutes = match zone {
        "" | "Z" | "UTC" => 0,
        z => {
            let sign = match z.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, mm) = z[1..].split_once(':')?;
            let (h, mm) = (number(h)?, number(mm)?);
            if h > 23 || mm > 59 {
                return None;
            }
            sign * (h * 60 + mm)
        }
    };
    let (whole, millis) = match clock.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) => {
            (whole, number(&format!("{fraction:0<3}")[..3])?)
        }
        Some(_) => return None,
        None => (clock, 0),
    };
    let parts: Vec<&str> = whole.split(':').collect();
    let (h, mi, s) = match parts[..] {
        [h, mi] if !clock.contains('.') => (number(h)?, number(mi)?, 0),
        [h, mi, s] => (number(h)?, number(mi)?, number(s)?),
        _ => return None,
    };
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let seconds = days_from_civil(y, m, d) * 86_400 + h * 3_600 + mi * 60 + s - offset_minutes * 60;
    Some((seconds * 1_000 + millis, !zone.is_empty()))
}

/// Milliseconds since 1970 in UTC of `at` (see [`parse_utc`]).
#[cfg(test)]
fn parse_utc_ms(at: &str) -> Option<i64> {
    parse_utc(at).map(|(ms, _)| ms)
}

/// The days of month `m` of year `y`.
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `at` against `now` (both in ms) as a person says it: "just now", "5 min ago",
/// "3 h ago", "2 days ago", "in 10 min"; older or later than 45 days, the date.
pub fn relative(at_ms: i64, now_ms: i64, exact: &str) -> String {
    let seconds = (now_ms - at_ms) / 1_000;
    let span = seconds.abs();
    let amount = if span < 45 {
        return "just now".to_owned();
    } else if span < 90 * 60 {
        format!("{} min", (span + 30) / 60)
    } else if span < 36 * 3_600 {
        format!("{} h", (span + 1_800) / 3_600)
    } else if span < 45 * 86_400 {
        format!("{} days", (span + 43_200) / 86_400)
    } else {
        return format!("on {}", exact.get(..10).unwrap_or(exact));
    };
    if seconds >= 0 {
        format!("{amount} ago")
    } else {
        format!("in {amount}")
    }
}

/// Now, in ms since 1970 (the browser's clock in the browser).
pub fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys::Date::now() as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default()
    }
}

/// A moment: relative text, the exact time as given on hover (`title`) and as RFC 3339 in
/// `datetime`. Text that is no time is shown as it is.
#[component]
pub fn When(#[prop(into)] at: String) -> impl IntoView {
    let Some((ms, zoned)) = parse_utc(&at) else {
        return view! { <span>{at}</span> }.into_any();
    };
    let exact = if zoned { at.clone() } else { format!("{at} UTC") };
    let text = relative(ms, now_ms(), &at);
    let datetime = rfc3339(ms);
    view! { <time datetime=datetime title=exact>{text}</time> }.into_any()
}

/// (year, month, day) of days since 1970-01-01: the inverse of `days_from_civil`.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of ms since 1970.
fn rfc3339(ms: i64) -> String {
    let seconds = ms.div_euclid(1_000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3_600,
        second_of_day % 3_600 / 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_times_the_server_writes_are_read_as_utc() {
        let ms = parse_utc_ms("2026-12-02 15:04 UTC").unwrap();
        assert_eq!(ms, 1_796_223_840_000);
        assert_eq!(parse_utc_ms("2026-12-02T15:04:00Z"), Some(ms));
        assert_eq!(parse_utc_ms("2026-12-02 15:04:00"), Some(ms));
        assert_eq!(parse_utc_ms("2026-12-02T17:04:00+02:00"), Some(ms));
        assert_eq!(parse_utc_ms("2026-12-02T15:04:00.25Z"), Some(ms + 250));
        assert_eq!(rfc3339(ms), "2026-12-02T15:04:00Z");
        assert_eq!(rfc3339(parse_utc_ms("2024-02-29 23:59:59").unwrap()), "2024-02-29T23:59:59Z");
        assert_eq!(parse_utc_ms("2026-12-02T13:04:00-02:00"), Some(ms));
        assert_eq!(parse_utc("2026-12-02T13:04:00-02:00").map(|(_, zoned)| zoned), Some(true));
        assert_eq!(parse_utc("2026-12-02 15:04:00").map(|(_, zoned)| zoned), Some(false));
        assert!(parse_utc_ms("2024-02-29 00:00").is_some());
        for bad in [
            "",
            "never",
            "2026-13-01 00:00",
            "2026-12-02",
            "2026-12-02 25:00",
            "2026-12-02 10:00 CET",
            "2026-02-29 00:00",
            "2026-04-31 00:00",
            "2026-1-011 00:00",
            "2026-12-02 15:04:00.",
            "2026-12-02 15:04.5",
            "2026-12-02T15:04:00+99999999999:00",
        ] {
            assert_eq!(parse_utc_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_moment_reads_relative_to_now() {
        let now = 1_796_223_840_000;
        let ago = |s: i64| relative(now - s * 1_000, now, "2026-12-02 15:04 UTC");
        assert_eq!(ago(10), "just now");
        assert_eq!(ago(5 * 60), "5 min ago");
        assert_eq!(ago(3 * 3_600), "3 h ago");
        assert_eq!(ago(2 * 86_400), "2 days ago");
        assert_eq!(ago(-10 * 60), "in 10 min");
        assert_eq!(ago(90 * 86_400), "on 2026-12-02");
    }
}
