//! What outcome reports carry: the channel code, the counts of one report, a minute's
//! counts and a window's totals, and why a report is refused.

use crate::quota::InvalidInput;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

use super::{MAX_CALLS, MAX_CHANNEL_LEN, MAX_COUNT};

/// A channel's code as reports name it: 1..=64 of `[A-Za-z0-9_.-]` (the same rule as the
/// `channel` table), so it can sit inside a key's hash tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ChannelCode(String);

impl ChannelCode {
    /// Parses a code; a refusal names the field `channel` and the rule.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() {
            return Err(InvalidInput::new("channel", "must not be empty"));
        }
        if raw.len() > MAX_CHANNEL_LEN {
            return Err(InvalidInput::new(
                "channel",
                format!("must be at most {MAX_CHANNEL_LEN} characters, got {}", raw.len()),
            ));
        }
        if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
            return Err(InvalidInput::new(
                "channel",
                format!("may hold only ASCII letters, digits, '_', '.', '-'; found {bad:?}"),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The code as written in keys and replies.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ChannelCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ChannelCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// One report's counts: outcomes of several calls through one channel, summed by the
/// caller (e.g. once a second). Valid when `ok`, `fail` and `latency_count` are each ≤
/// [`MAX_CALLS`] and `latency_ms_sum` ≤ [`MAX_COUNT`], there is at
/// least one outcome (`ok + fail ≥ 1`), `latency_count ≤ ok + fail`, and there is no
/// latency sum without a latency count: [`OutcomeCounts::new`] and deserializing check
/// this, and [`crate::Outcomes`] checks it again before anything is sent (the fields are public,
/// like [`crate::quota::TenantQuota`]'s, for callers that sum counts in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OutcomeCounts {
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed.
    pub fail: u64,
    /// The sum of the measured latencies, in milliseconds.
    pub latency_ms_sum: u64,
    /// How many latencies `latency_ms_sum` adds up.
    pub latency_count: u64,
}

impl OutcomeCounts {
    /// Checked counts; a refusal names the field and the rule.
    pub fn new(ok: u64, fail: u64, latency_ms_sum: u64, latency_count: u64) -> Result<Self, InvalidInput> {
        let counts = Self { ok, fail, latency_ms_sum, latency_count };
        counts.validate()?;
        Ok(counts)
    }

    /// Checks the rules above; a refusal names the field and the rule.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let Self { ok, fail, latency_ms_sum, latency_count } = *self;
        for (field, value, max) in [
            ("ok", ok, MAX_CALLS),
            ("fail", fail, MAX_CALLS),
            ("latency_ms_sum", latency_ms_sum, MAX_COUNT),
            ("latency_count", latency_count, MAX_CALLS),
        ] {
            if value > max {
                let rule = if max == MAX_CALLS { " calls a report (send more reports)" } else { "" };
                return Err(InvalidInput::new(field, format!("must be at most {max}{rule}, got {value}")));
            }
        }
        if ok == 0 && fail == 0 {
            let rule = if latency_ms_sum == 0 && latency_count == 0 {
                "ok and fail are both 0: a report must count at least one outcome"
            } else {
                "ok and fail are both 0: latencies need outcomes to belong to"
            };
            return Err(InvalidInput::new("ok", rule));
        }
        if latency_count > ok + fail {
            return Err(InvalidInput::new(
                "latency_count",
                format!("must be at most ok + fail ({}), got {latency_count}", ok + fail),
            ));
        }
        if latency_count == 0 && latency_ms_sum > 0 {
            return Err(InvalidInput::new("latency_count", "must be at least 1 when latency_ms_sum is above 0"));
        }
        Ok(())
    }

    /// One call's outcome, with its latency when it was measured (whole milliseconds,
    /// truncated; capped at [`MAX_COUNT`] ms).
    pub fn one(success: bool, latency: Option<Duration>) -> Self {
        let (ok, fail) = if success { (1, 0) } else { (0, 1) };
        let (latency_ms_sum, latency_count) = match latency {
            Some(l) => (u64::try_from(l.as_millis()).unwrap_or(MAX_COUNT).min(MAX_COUNT), 1),
            None => (0, 0),
        };
        Self { ok, fail, latency_ms_sum, latency_count }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCounts {
    ok: u64,
    fail: u64,
    #[serde(default)]
    latency_ms_sum: u64,
    #[serde(default)]
    latency_count: u64,
}

impl<'de> Deserialize<'de> for OutcomeCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawCounts::deserialize(d)?;
        Self::new(raw.ok, raw.fail, raw.latency_ms_sum, raw.latency_count).map_err(serde::de::Error::custom)
    }
}

/// What Redis holds for one minute of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MinuteCounts {
    /// Unix minutes (seconds since the epoch / 60, rounded down).
    pub minute: i64,
    pub ok: u64,
    pub fail: u64,
    pub latency_ms_sum: u64,
    pub latency_count: u64,
}

/// The sums over several minutes, for the evaluation's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Totals {
    pub ok: u64,
    pub fail: u64,
    pub latency_ms_sum: u64,
    pub latency_count: u64,
}

impl Totals {
    /// Sums the minutes of a window.
    pub fn of(minutes: &[MinuteCounts]) -> Self {
        minutes.iter().fold(Self::default(), |t, m| Self {
            ok: t.ok.saturating_add(m.ok),
            fail: t.fail.saturating_add(m.fail),
            latency_ms_sum: t.latency_ms_sum.saturating_add(m.latency_ms_sum),
            latency_count: t.latency_count.saturating_add(m.latency_count),
        })
    }

    /// Every outcome counted.
    pub fn outcomes(&self) -> u64 {
        self.ok.saturating_add(self.fail)
    }

    /// `fail / (ok + fail)`; `None` without outcomes.
    pub fn failure_ratio(&self) -> Option<f64> {
        let n = self.outcomes();
        (n > 0).then(|| self.fail as f64 / n as f64)
    }

    /// The mean measured latency; `None` without latencies.
    pub fn mean_latency_ms(&self) -> Option<f64> {
        (self.latency_count > 0).then(|| self.latency_ms_sum as f64 / self.latency_count as f64)
    }
}

/// Why reporting or reading outcomes failed.
#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// An input that breaks a rule; nothing was sent to Redis.
    #[error("{0}")]
    Invalid(InvalidInput),
    /// Redis cannot be reached (or was found unreachable moments ago). A report is dropped.
    #[error("outcome store (redis) unreachable: {0}")]
    Unavailable(#[source] redis::RedisError),
    /// Redis answered with an error.
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    /// Redis holds or answered something this client does not understand.
    #[error("unexpected reply from {script}: {detail}")]
    Protocol { script: &'static str, detail: String },
}

impl OutcomeError {
    /// True when Redis could not be reached (as opposed to answering with an error).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

impl From<InvalidInput> for OutcomeError {
    fn from(e: InvalidInput) -> Self {
        Self::Invalid(e)
    }
}
