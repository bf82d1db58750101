//! Validated inputs shared by the configuration resources: the names and the exact-integer
//! limit come from the `api` crate; weights are checked here.

use actix_web::HttpRequest;
use chrono::{DateTime, SecondsFormat, Utc};
use client::quota::InvalidInput;
use serde::{Deserialize, Serialize};

use crate::error::ChangeError;

pub use api::{ChannelCode, DisplayName, PlanName, MAX_INTEGER};

impl From<api::Invalid> for ChangeError {
    fn from(e: api::Invalid) -> Self {
        ChangeError::Invalid { field: e.field, rule: e.rule }
    }
}

pub(crate) fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ChangeError {
    ChangeError::Invalid { field: field.into(), rule: rule.into() }
}

pub(crate) fn from_input(e: InvalidInput) -> ChangeError {
    ChangeError::Invalid { field: e.field, rule: e.rule }
}

/// Lower-case hex of `bytes`, as Postgres's `encode(…, 'hex')` writes it.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex text (either case); `None` unless it is whole pairs of hex digits.
pub fn parse_hex(text: &str) -> Option<Vec<u8>> {
    // Digits only: `u8::from_str_radix` alone would take a pair like "+f".
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok())).collect()
}

/// A JSON number as the integer it is: `4865` and `4865.0` (JSON Schema counts an integral
/// float as an integer) are 4865; `None` for a fraction.
pub(crate) fn exact_integer(n: &serde_json::Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
        .or_else(|| n.as_f64().and_then(client::quota::exact_integer))
}

/// `#[serde(deserialize_with = "crate::inputs::integer")]`: an integer field that JSON may
/// write as `5` or `5.0` (JSON Schema counts both as the integer 5; serde's own integer
/// types refuse the second).
pub(crate) fn integer<'de, D: serde::Deserializer<'de>, T: TryFrom<i128>>(d: D) -> Result<T, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    exact_integer(&n)
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| serde::de::Error::custom(format!("invalid value: {n}, expected an integer in range")))
}

/// [`integer`] for an optional field (with `#[serde(default)]`): `null` and a missing field
/// are `None`.
pub(crate) fn optional_integer<'de, D: serde::Deserializer<'de>, T: TryFrom<i128>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<serde_json::Number>::deserialize(d)?
        .map(|n| {
            exact_integer(&n)
                .and_then(|v| T::try_from(v).ok())
                .ok_or_else(|| serde::de::Error::custom(format!("invalid value: {n}, expected an integer in range")))
        })
        .transpose()
}

/// [`integer`] for the values of a map (`{"A": 100, "B": 5.0}`).
pub(crate) fn integer_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, u64>, D::Error> {
    std::collections::BTreeMap::<String, serde_json::Number>::deserialize(d)?
        .into_iter()
        .map(|(k, n)| match exact_integer(&n).and_then(|v| u64::try_from(v).ok()) {
            Some(v) => Ok((k, v)),
            None => Err(serde::de::Error::custom(format!("invalid value: {n}, expected an integer in range"))),
        })
        .collect()
}

/// A weight: an integer in 0..=2^53−1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Weight(u64);

impl Weight {
    pub fn parse(field: &str, value: i128) -> Result<Self, ChangeError> {
        if !(0..=MAX_INTEGER as i128).contains(&value) {
            return Err(invalid(field, format!("must be an integer in 0..={MAX_INTEGER}, got {value}")));
        }
        Ok(Self(value as u64))
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Number::deserialize(d)?;
        let value = exact_integer(&value).ok_or_else(|| {
            serde::de::Error::custom(format!("base_weight: must be an integer in 0..={MAX_INTEGER}, got {value}"))
        })?;
        Self::parse("base_weight", value).map_err(serde::de::Error::custom)
    }
}

/// The caller's request id (`X-Request-Id`, at most 200 characters), for the audit trail.
pub(crate) fn request_id(req: &HttpRequest) -> Option<String> {
    req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(|v| v.chars().take(200).collect())
}

/// A timestamp as the replies carry it: RFC 3339 in UTC with `Z`, and as many fractional
/// digits as it needs (0, 3, 6 or 9): exactly what chrono's serde writes.
pub(crate) fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_goes_both_ways_and_a_broken_text_is_none() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        assert_eq!(parse_hex("00ab7F"), Some(vec![0x00, 0xab, 0x7f]));
        assert_eq!(parse_hex(""), Some(vec![]));
        for bad in ["0", "0g", "é0", "+1"] {
            assert_eq!(parse_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_integral_float_is_an_exact_integer_and_a_fraction_is_not() {
        let n = |raw: &str| serde_json::from_str::<serde_json::Number>(raw).unwrap();
        assert_eq!(exact_integer(&n("4865")), Some(4865));
        assert_eq!(exact_integer(&n("4865.0")), Some(4865));
        assert_eq!(exact_integer(&n("-3.0")), Some(-3));
        assert_eq!(exact_integer(&n("18446744073709551615")), Some(u64::MAX.into()));
        assert_eq!(exact_integer(&n("4865.5")), None);
        assert_eq!(serde_json::from_str::<Weight>("7.0").unwrap().get(), 7);
    }

    #[test]
    fn a_timestamp_reads_as_chrono_serializes_it() {
        let second = chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2026, 3, 1, 12, 30, 5).unwrap();
        for nanos in [0, 120_000_000, 123_456_000, 123_456_789, 1_000, 1] {
            let at = second + chrono::TimeDelta::nanoseconds(nanos);
            assert_eq!(serde_json::to_value(at).unwrap(), serde_json::Value::String(rfc3339(at)), "{nanos} ns");
        }
    }
}
