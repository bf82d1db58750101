//! Validated inputs shared by the configuration resources: the names and the exact-integer
//! limit come from the `api` crate; weights are checked here.

use client::quota::InvalidInput;
use serde::{Deserialize, Serialize};

use crate::change::ChangeError;

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
