//! Peak windows: `[start, end)` wall-clock times in the pool's timezone, with a batch
//! multiplier and optional weight overrides.
//!
//! A window is judged on the *local wall clock*: an instant is inside when its local time
//! of day `t` satisfies `start <= t < end` (or, when `start > end`, the window crosses
//! midnight and `t >= start || t < end`). `start == end` is refused: it would be either
//! empty or the whole day, and neither is what anyone means.
//!
//! Daylight saving time follows from that definition:
//! - **Spring forward** (a gap, e.g. 02:00→03:00 in New York): local times in the gap never
//!   occur, so a window starting in the gap starts at the first local time after it
//!   (03:00), and a window lying wholly inside the gap does not happen that day.
//! - **Fall back** (an overlap, e.g. 01:00–02:00 occurs twice): a window covering the
//!   repeated hour applies during both occurrences, so it lasts longer in real time.

use chrono::{DateTime, NaiveTime, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Weights;

/// Why a peak window or schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PeakError {
    #[error("time `{value}` is not a local time of day: expected HH:MM or HH:MM:SS (24-hour)")]
    InvalidTime { value: String },
    #[error("peak window starts and ends at {at}: start and end must differ (start > end crosses midnight)")]
    EmptyWindow { at: NaiveTime },
    #[error("peak window {start}–{end} has multiplier {multiplier}: the batch multiplier must be at least 1")]
    MultiplierBelowOne { start: NaiveTime, end: NaiveTime, multiplier: u32 },
    #[error("peak windows {first} and {second} overlap: a moment may fall in one window at most")]
    Overlap { first: String, second: String },
    #[error("timezone `{value}` is unknown: expected an IANA name such as Europe/London")]
    UnknownTimezone { value: String },
}

/// Parses `HH:MM` or `HH:MM:SS` (24-hour).
pub fn parse_local_time(value: &str) -> Result<NaiveTime, PeakError> {
    let v = value.trim();
    NaiveTime::parse_from_str(v, "%H:%M")
        .or_else(|_| NaiveTime::parse_from_str(v, "%H:%M:%S"))
        .map_err(|_| PeakError::InvalidTime { value: value.to_owned() })
}

/// One daily peak window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PeakWindowRaw", into = "PeakWindowRaw")]
pub struct PeakWindow {
    start: NaiveTime,
    end: NaiveTime,
    multiplier: u32,
    weights: Option<Weights>,
}

/// Serialised form of a [`PeakWindow`]: times as `"HH:MM"` (or `"HH:MM:SS"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakWindowRaw {
    pub start: String,
    pub end: String,
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub multiplier: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
}

impl TryFrom<PeakWindowRaw> for PeakWindow {
    type Error = PeakError;
    fn try_from(raw: PeakWindowRaw) -> Result<Self, Self::Error> {
        PeakWindow::new(parse_local_time(&raw.start)?, parse_local_time(&raw.end)?, raw.multiplier, raw.weights)
    }
}

fn format_time(t: NaiveTime) -> String {
    if t.second() == 0 {
        t.format("%H:%M").to_string()
    } else {
        t.format("%H:%M:%S").to_string()
    }
}

impl From<PeakWindow> for PeakWindowRaw {
    fn from(w: PeakWindow) -> Self {
        PeakWindowRaw {
            start: format_time(w.start),
            end: format_time(w.end),
            multiplier: w.multiplier,
            weights: w.weights,
        }
    }
}

impl PeakWindow {
    /// A window `[start, end)`; `start > end` crosses midnight; `multiplier >= 1`.
    pub fn new(start: NaiveTime, end: NaiveTime, multiplier: u32, weights: Option<Weights>) -> Result<Self, PeakError> {
        let (start, end) = (start.with_nanosecond(0).unwrap_or(start), end.with_nanosecond(0).unwrap_or(end));
        if start == end {
            return Err(PeakError::EmptyWindow { at: start });
        }
        if multiplier < 1 {
            return Err(PeakError::MultiplierBelowOne { start, end, multiplier });
        }
        Ok(Self { start, end, multiplier, weights })
    }

    /// Local start time (inclusive).
    pub fn start(&self) -> NaiveTime {
        self.start
    }

    /// Local end time (exclusive).
    pub fn end(&self) -> NaiveTime {
        self.end
    }

    /// Whether the window crosses local midnight.
    pub fn crosses_midnight(&self) -> bool {
        self.start > self.end
    }

    /// Batch size multiplier during the window (>= 1).
    pub fn multiplier(&self) -> u32 {
        self.multiplier
    }

    /// Weights used instead of the pool's during the window, if any.
    pub fn weights(&self) -> Option<&Weights> {
        self.weights.as_ref()
    }

    /// Whether a local time of day falls in the window.
    pub fn contains(&self, local: NaiveTime) -> bool {
        if self.crosses_midnight() {
            local >= self.start || local < self.end
        } else {
            self.start <= local && local < self.end
        }
    }

    /// The window as second-of-day ranges `[a, b)` (two when it crosses midnight).
    fn segments(&self) -> Vec<(u32, u32)> {
        let (s, e) = (self.start.num_seconds_from_midnight(), self.end.num_seconds_from_midnight());
        if s < e {
            vec![(s, e)]
        } else {
            vec![(s, 86_400), (0, e)]
        }
    }

    pub fn label(&self) -> String {
        format!("{}–{}", format_time(self.start), format_time(self.end))
    }
}

/// A pool's peak windows in its timezone; windows never overlap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PeakScheduleRaw", into = "PeakScheduleRaw")]
pub struct PeakSchedule {
    timezone: Tz,
    windows: Vec<PeakWindow>,
}

/// Serialised form of a [`PeakSchedule`]: an IANA timezone name and the windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakScheduleRaw {
    pub timezone: String,
    pub windows: Vec<PeakWindow>,
}

impl TryFrom<PeakScheduleRaw> for PeakSchedule {
    type Error = PeakError;
    fn try_from(raw: PeakScheduleRaw) -> Result<Self, Self::Error> {
        let timezone =
            raw.timezone.parse::<Tz>().map_err(|_| PeakError::UnknownTimezone { value: raw.timezone.clone() })?;
        PeakSchedule::new(timezone, raw.windows)
    }
}

impl From<PeakSchedule> for PeakScheduleRaw {
    fn from(s: PeakSchedule) -> Self {
        PeakScheduleRaw { timezone: s.timezone.name().to_owned(), windows: s.windows }
    }
}

impl PeakSchedule {
    /// Validates that no two windows overlap.
    pub fn new(timezone: Tz, windows: Vec<PeakWindow>) -> Result<Self, PeakError> {
        Self::check_windows(&windows)?;
        Ok(Self { timezone, windows })
    }

    /// Checks that no two windows overlap, naming the first two that do (without a
    /// timezone: the editor checks as the user types). `O(n log n)` in the windows: the
    /// segments sorted by start, each overlaps another exactly when it starts before an
    /// earlier one ends or the next one starts before it ends.
    pub fn check_windows(windows: &[PeakWindow]) -> Result<(), PeakError> {
        let segments: Vec<Vec<(u32, u32)>> = windows.iter().map(PeakWindow::segments).collect();
        let mut sorted: Vec<(u32, u32, usize)> =
            segments.iter().enumerate().flat_map(|(i, s)| s.iter().map(move |&(a, b)| (a, b, i))).collect();
        sorted.sort_unstable();
        // The first window that overlaps any other: every window it overlaps comes after it.
        let mut first: Option<usize> = None;
        let mut reach: Option<(u32, usize)> = None;
        for (k, &(start, end, i)) in sorted.iter().enumerate() {
            let after_earlier = reach.is_some_and(|(e, j)| j != i && start < e);
            let before_next = sorted.get(k + 1).is_some_and(|&(next, _, j)| j != i && next < end);
            if after_earlier || before_next {
                first = Some(first.map_or(i, |f| f.min(i)));
            }
            if reach.is_none_or(|(e, _)| end > e) {
                reach = Some((end, i));
            }
        }
        let Some(i) = first else { return Ok(()) };
        let overlaps =
            |a: &[(u32, u32)], b: &[(u32, u32)]| a.iter().any(|&(s1, e1)| b.iter().any(|&(s2, e2)| s1 < e2 && s2 < e1));
        let j = (i + 1..windows.len()).find(|&j| overlaps(&segments[i], &segments[j])).unwrap_or(i);
        Err(PeakError::Overlap { first: windows[i].label(), second: windows[j].label() })
    }

    /// Parses an IANA timezone name, for callers holding text.
    pub fn parse_timezone(name: &str) -> Result<Tz, PeakError> {
        name.trim().parse::<Tz>().map_err(|_| PeakError::UnknownTimezone { value: name.to_owned() })
    }

    /// The pool's timezone.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// The windows, as given.
    pub fn windows(&self) -> &[PeakWindow] {
        &self.windows
    }

    /// The local wall-clock time of an instant in the pool's timezone.
    pub fn local_time(&self, instant: DateTime<Utc>) -> NaiveTime {
        instant.with_timezone(&self.timezone).time()
    }

    /// The window in force at `instant`, if any.
    pub fn active_at(&self, instant: DateTime<Utc>) -> Option<&PeakWindow> {
        let local = self.local_time(instant);
        self.windows.iter().find(|w| w.contains(local))
    }

    /// The batch multiplier at `instant` (1 outside every window).
    pub fn multiplier_at(&self, instant: DateTime<Utc>) -> u32 {
        self.active_at(instant).map_or(1, PeakWindow::multiplier)
    }

    /// The weights in force at `instant`: the window's override, else `base`.
    pub fn weights_at<'a>(&'a self, instant: DateTime<Utc>, base: &'a Weights) -> &'a Weights {
        self.active_at(instant).and_then(PeakWindow::weights).unwrap_or(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t(s: &str) -> NaiveTime {
        parse_local_time(s).unwrap()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn schedule(tz: &str, windows: &[(&str, &str, u32)]) -> PeakSchedule {
        let windows = windows.iter().map(|&(s, e, m)| PeakWindow::new(t(s), t(e), m, None).unwrap()).collect();
        PeakSchedule::new(PeakSchedule::parse_timezone(tz).unwrap(), windows).unwrap()
    }

    #[test]
    fn a_window_crossing_midnight_covers_both_sides_and_excludes_its_end() {
        let s = schedule("Asia/Shanghai", &[("22:00", "06:00", 3)]);
        // Shanghai is UTC+8 all year.
        assert_eq!(s.multiplier_at(utc("2026-06-01T14:00:00Z")), 3); // 22:00 local
        assert_eq!(s.multiplier_at(utc("2026-06-01T15:30:00Z")), 3); // 23:30
        assert_eq!(s.multiplier_at(utc("2026-06-01T16:00:00Z")), 3); // 00:00
        assert_eq!(s.multiplier_at(utc("2026-06-01T21:59:59Z")), 3); // 05:59:59
        assert_eq!(s.multiplier_at(utc("2026-06-01T22:00:00Z")), 1); // 06:00
        assert_eq!(s.multiplier_at(utc("2026-06-01T13:59:59Z")), 1); // 21:59:59
    }

    #[test]
    fn start_equal_to_end_is_refused() {
        let err = PeakWindow::new(t("09:00"), t("09:00"), 2, None).unwrap_err();
        assert!(err.to_string().contains("start and end must differ"), "{err}");
    }

    #[test]
    fn a_multiplier_below_one_is_refused() {
        let err = PeakWindow::new(t("09:00"), t("10:00"), 0, None).unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }

    #[test]
    fn overlapping_windows_are_refused_naming_both() {
        let a = PeakWindow::new(t("22:00"), t("02:00"), 2, None).unwrap();
        let b = PeakWindow::new(t("01:00"), t("03:00"), 2, None).unwrap();
        let err = PeakSchedule::new(chrono_tz::UTC, vec![a.clone(), b]).unwrap_err().to_string();
        assert!(err.contains("22:00–02:00") && err.contains("01:00–03:00"), "{err}");
        let touching = PeakWindow::new(t("02:00"), t("03:00"), 2, None).unwrap();
        assert!(PeakSchedule::new(chrono_tz::UTC, vec![a, touching]).is_ok());
    }

    #[test]
    fn new_york_spring_forward_starts_a_window_in_the_gap_at_three() {
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
        let s = schedule("America/New_York", &[("02:30", "04:00", 2), ("02:10", "02:20", 5)]);
        assert_eq!(s.multiplier_at(utc("2026-03-08T06:59:59Z")), 1); // 01:59:59 EST
        assert_eq!(s.multiplier_at(utc("2026-03-08T07:00:00Z")), 2); // 03:00 EDT
        assert_eq!(s.multiplier_at(utc("2026-03-08T07:59:59Z")), 2); // 03:59:59 EDT
        assert_eq!(s.multiplier_at(utc("2026-03-08T08:00:00Z")), 1); // 04:00 EDT
                                                                     // The 02:10–02:20 window never happens that day.
        let day = (0..24 * 60).map(|m| utc("2026-03-08T05:00:00Z") + chrono::Duration::minutes(m));
        assert!(day.clone().all(|i| s.multiplier_at(i) != 5));
        // …but does the next day.
        assert_eq!(s.multiplier_at(utc("2026-03-09T06:15:00Z")), 5); // 02:15 EDT
    }

    #[test]
    fn new_york_fall_back_applies_a_window_in_the_repeated_hour_twice() {
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:00–02:00 happens twice.
        let s = schedule("America/New_York", &[("01:15", "01:45", 4)]);
        assert_eq!(s.multiplier_at(utc("2026-11-01T05:20:00Z")), 4); // 01:20 EDT
        assert_eq!(s.multiplier_at(utc("2026-11-01T05:50:00Z")), 1); // 01:50 EDT
        assert_eq!(s.multiplier_at(utc("2026-11-01T06:20:00Z")), 4); // 01:20 EST
        assert_eq!(s.multiplier_at(utc("2026-11-01T06:45:00Z")), 1); // 01:45 EST
        let minutes = (0..24 * 60)
            .map(|m| utc("2026-11-01T04:00:00Z") + chrono::Duration::minutes(m))
            .filter(|&i| s.multiplier_at(i) == 4)
            .count();
        assert_eq!(minutes, 60);
    }

    #[test]
    fn london_spring_forward_and_fall_back_behave_the_same_way() {
        // 2026-03-29: 01:00 GMT → 02:00 BST. A window 00:30–01:30 ends early: 01:00 UTC is 02:00 BST.
        let s = schedule("Europe/London", &[("00:30", "01:30", 2), ("23:00", "00:30", 3)]);
        assert_eq!(s.multiplier_at(utc("2026-03-29T00:45:00Z")), 2); // 00:45 GMT
        assert_eq!(s.multiplier_at(utc("2026-03-29T01:00:00Z")), 1); // 02:00 BST
                                                                     // 2026-10-25: 02:00 BST → 01:00 GMT: 01:00–01:30 local happens twice.
        assert_eq!(s.multiplier_at(utc("2026-10-25T00:15:00Z")), 2); // 01:15 BST
        assert_eq!(s.multiplier_at(utc("2026-10-25T01:15:00Z")), 2); // 01:15 GMT
                                                                     // Crossing midnight the evening before the change, in BST.
        assert_eq!(s.multiplier_at(utc("2026-10-24T22:30:00Z")), 3); // 23:30 BST
    }

    #[test]
    fn a_window_override_replaces_the_weights_only_inside_it() {
        let base = Weights::parse_spec("A=5,B=5").unwrap();
        let peak = Weights::parse_spec("A=9,B=1").unwrap();
        let w = PeakWindow::new(t("18:00"), t("20:00"), 2, Some(peak.clone())).unwrap();
        let s = PeakSchedule::new(chrono_tz::UTC, vec![w]).unwrap();
        assert_eq!(s.weights_at(utc("2026-01-01T19:00:00Z"), &base), &peak);
        assert_eq!(s.weights_at(utc("2026-01-01T20:00:00Z"), &base), &base);
    }

    #[test]
    fn schedules_round_trip_through_serde_with_validation() {
        let s = schedule("Europe/London", &[("22:00", "06:00", 2)]);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"timezone":"Europe/London","windows":[{"start":"22:00","end":"06:00","multiplier":2}]}"#);
        assert_eq!(serde_json::from_str::<PeakSchedule>(&json).unwrap(), s);
        let bad = json.replace("06:00", "22:00");
        assert!(serde_json::from_str::<PeakSchedule>(&bad).is_err());
        let bad_tz = json.replace("Europe/London", "Mars/Olympus");
        assert!(serde_json::from_str::<PeakSchedule>(&bad_tz).unwrap_err().to_string().contains("Mars/Olympus"));
    }

    const ZONES: [Tz; 5] = [
        chrono_tz::America::New_York,
        chrono_tz::Europe::London,
        chrono_tz::Australia::Lord_Howe,
        chrono_tz::Asia::Kolkata,
        chrono_tz::UTC,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn the_overlap_check_names_the_pair_a_check_of_every_pair_names(
            spans in proptest::collection::vec((0u32..96, 1u32..96), 0..12),
        ) {
            // Windows on a quarter-hour grid, some crossing midnight.
            let windows: Vec<PeakWindow> = spans
                .iter()
                .map(|&(start, length)| {
                    let at = |q: u32| NaiveTime::from_num_seconds_from_midnight_opt((q % 96) * 900, 0).unwrap();
                    PeakWindow::new(at(start), at(start + length), 2, None).unwrap()
                })
                .collect();
            let mut pairwise = Ok(());
            'outer: for (i, a) in windows.iter().enumerate() {
                for b in &windows[i + 1..] {
                    if a.segments().iter().any(|&(s1, e1)| b.segments().iter().any(|&(s2, e2)| s1 < e2 && s2 < e1)) {
                        pairwise = Err(PeakError::Overlap { first: a.label(), second: b.label() });
                        break 'outer;
                    }
                }
            }
            prop_assert_eq!(PeakSchedule::check_windows(&windows), pairwise);
        }

        #[test]
        fn a_window_and_its_complement_split_every_instant_exactly(
            start in 0u32..1440, end in 0u32..1440, zone in 0usize..5,
            // 2026-01-01 .. 2027-01-01, in seconds: covers both DST changes everywhere.
            offset in 0i64..365 * 86_400,
        ) {
            prop_assume!(start != end);
            let tm = |m: u32| NaiveTime::from_num_seconds_from_midnight_opt(m * 60, 0).unwrap();
            let w = PeakWindow::new(tm(start), tm(end), 2, None).unwrap();
            let complement = PeakWindow::new(tm(end), tm(start), 3, None).unwrap();
            let s = PeakSchedule::new(ZONES[zone], vec![w, complement]).unwrap();
            let instant = Utc.timestamp_opt(1_767_225_600 + offset, 0).unwrap();
            let local = instant.with_timezone(&ZONES[zone]).time();
            let expected = if start < end {
                local >= tm(start) && local < tm(end)
            } else {
                local >= tm(start) || local < tm(end)
            };
            prop_assert_eq!(s.multiplier_at(instant), if expected { 2 } else { 3 });
        }
    }
}
