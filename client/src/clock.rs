//! Where the time of a quota or pool decision comes from.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};

/// The clock the scripts use. In production it is Redis `TIME` (one clock for every
/// client, whatever their own clocks say); tests and tools may set the time by hand.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// Redis `TIME`, read inside each script.
    #[default]
    Redis,
    /// A time set by hand (milliseconds since the epoch), shared by clones.
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// A hand-set clock starting at `at`.
    pub fn manual(at: DateTime<Utc>) -> Self {
        Self::Manual(Arc::new(AtomicI64::new(at.timestamp_millis())))
    }

    /// Moves a hand-set clock to `at` (no effect on the Redis clock).
    pub fn set(&self, at: DateTime<Utc>) {
        if let Self::Manual(ms) = self {
            ms.store(at.timestamp_millis(), Ordering::SeqCst);
        }
    }

    /// The argument scripts take as "now": empty for Redis `TIME`.
    pub(crate) fn script_arg(&self) -> String {
        match self {
            Self::Redis => String::new(),
            Self::Manual(ms) => ms.load(Ordering::SeqCst).to_string(),
        }
    }

    /// The best local guess of now, used to name the period keys a script is sent; the
    /// script checks the guess against its own clock.
    pub(crate) fn guess(&self) -> DateTime<Utc> {
        match self {
            Self::Redis => Utc::now(),
            Self::Manual(ms) => Utc.timestamp_millis_opt(ms.load(Ordering::SeqCst)).single().unwrap_or_else(Utc::now),
        }
    }
}

/// A quota period: a UTC calendar month, written `YYYY-MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    year: i32,
    month: u32,
}

impl Period {
    /// The period holding `at`.
    pub fn of(at: DateTime<Utc>) -> Self {
        Self { year: at.year(), month: at.month() }
    }

    /// Parses `YYYY-MM` as the scripts write it.
    pub fn parse(raw: &str) -> Option<Self> {
        let (y, m) = raw.split_once('-')?;
        let (year, month) = (y.parse().ok()?, m.parse().ok()?);
        (y.len() == 4 && m.len() == 2 && (1..=12).contains(&month)).then_some(Self { year, month })
    }

    /// When this period begins, in ms since the epoch.
    pub fn start_ms(self) -> i64 {
        Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0).single().expect("valid month").timestamp_millis()
    }

    /// When the next period begins, in ms since the epoch.
    pub fn next_start_ms(self) -> i64 {
        let first = Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0).single().expect("valid month");
        first.checked_add_months(Months::new(1)).expect("in range").timestamp_millis()
    }

    /// The period before this one.
    pub fn previous(self) -> Self {
        let first = Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0).single().expect("valid month");
        Self::of(first.checked_sub_months(Months::new(1)).expect("in range"))
    }
}

impl std::fmt::Display for Period {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_names_its_month_and_knows_the_one_before() {
        let p = Period::of(Utc.with_ymd_and_hms(2026, 1, 31, 23, 59, 59).unwrap());
        assert_eq!(p.to_string(), "2026-01");
        assert_eq!(p.previous().to_string(), "2025-12");
        assert_eq!(Period::parse("2026-11"), Some(Period::of(Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap())));
        assert_eq!(Period::parse("2026-13"), None);
    }
}
