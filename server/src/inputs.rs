//! Validated inputs shared by the configuration resources: identifiers, display names,
//! weights and the exact-integer limit.

use client::quota::InvalidInput;
use serde::{Deserialize, Serialize};

use crate::change::ChangeError;

pub(crate) fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ChangeError {
    ChangeError::Invalid { field: field.into(), rule: rule.into() }
}

pub(crate) fn from_input(e: InvalidInput) -> ChangeError {
    ChangeError::Invalid { field: e.field, rule: e.rule }
}

// ---------------------------------------------------------------------------------------
// Validated inputs
// ---------------------------------------------------------------------------------------

pub(crate) fn identifier(field: &str, raw: &str, extra: &str) -> Result<String, ChangeError> {
    if raw.is_empty() || raw.len() > 64 {
        return Err(invalid(field, format!("must be 1..=64 characters, got {}", raw.chars().count())));
    }
    if let Some(bad) =
        raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(*c)))
    {
        return Err(invalid(field, format!("may hold only ASCII letters, digits, '_', '-'{extra}; found {bad:?}")));
    }
    Ok(raw.to_owned())
}

macro_rules! validated_string {
    ($(#[$doc:meta])* $name:ident, $parse:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parses the value, naming the field and the rule when it is refused.
            pub fn parse(raw: &str) -> Result<Self, ChangeError> {
                let parse: fn(&str) -> Result<String, ChangeError> = $parse;
                parse(raw).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

validated_string!(
    /// A channel's code: 1..=64 of `[A-Za-z0-9_.-]` (the name tickets carry).
    ChannelCode, |raw| identifier("code", raw, ".")
);
validated_string!(
    /// A plan's name: 1..=64 of `[A-Za-z0-9_-]`.
    PlanName, |raw| identifier("plan", raw, "")
);
validated_string!(
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    DisplayName,
    |raw| {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(invalid("name", "must not be blank"));
        }
        if trimmed.chars().count() > 200 {
            return Err(invalid("name", format!("must be at most 200 characters, got {}", trimmed.chars().count())));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(invalid("name", "must not hold control characters"));
        }
        Ok(trimmed.to_owned())
    }
);

/// The largest weight or amount Lua holds exactly: 2^53 − 1.
pub const MAX_INTEGER: u64 = (1 << 53) - 1;

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
        let value = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)).ok_or_else(|| {
            serde::de::Error::custom(format!("base_weight: must be an integer in 0..={MAX_INTEGER}, got {value}"))
        })?;
        Self::parse("base_weight", value).map_err(serde::de::Error::custom)
    }
}
