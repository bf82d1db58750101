//! The batch size: how many tickets one refill materialises.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a batch size was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchSizeError {
    #[error("batch size is 0: a batch must hold at least one ticket")]
    Zero,
    #[error("batch size {size} is above the configured maximum of {max}")]
    AboveMax { size: u64, max: u32 },
}

/// A number of tickets per batch, `1..=max` for the configured maximum.
///
/// Serialises as a plain number; deserialising checks only `>= 1` and the absolute
/// ceiling [`BatchSize::ABSOLUTE_MAX`] (the configured maximum is not known there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u32")]
pub struct BatchSize(u32);

impl BatchSize {
    /// design.md §3's default.
    pub const DEFAULT: BatchSize = BatchSize(1024);
    /// The largest batch any configuration may allow (keeps carries and products small).
    pub const ABSOLUTE_MAX: u32 = 1 << 24;

    /// Validates `size` against the configured `max` (itself capped at [`Self::ABSOLUTE_MAX`]).
    pub fn new(size: u64, max: u32) -> Result<Self, BatchSizeError> {
        let max = max.min(Self::ABSOLUTE_MAX);
        if size == 0 {
            return Err(BatchSizeError::Zero);
        }
        if size > u64::from(max) {
            return Err(BatchSizeError::AboveMax { size, max });
        }
        Ok(BatchSize(size as u32))
    }

    /// The size as a number.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The size as a length.
    pub fn len(self) -> usize {
        self.0 as usize
    }

    /// Always false; present for API symmetry with `len`.
    pub fn is_empty(self) -> bool {
        false
    }

    /// Multiplies by a peak-window multiplier, still bounded by `max`.
    pub fn scaled(self, multiplier: u32, max: u32) -> Result<Self, BatchSizeError> {
        Self::new(u64::from(self.0) * u64::from(multiplier), max)
    }
}

impl TryFrom<u64> for BatchSize {
    type Error = BatchSizeError;
    fn try_from(size: u64) -> Result<Self, Self::Error> {
        Self::new(size, Self::ABSOLUTE_MAX)
    }
}

impl From<BatchSize> for u32 {
    fn from(b: BatchSize) -> u32 {
        b.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_batch_is_refused() {
        assert_eq!(BatchSize::new(0, 4096), Err(BatchSizeError::Zero));
    }

    #[test]
    fn a_batch_above_the_configured_maximum_is_refused_naming_both() {
        let err = BatchSize::new(5000, 4096).unwrap_err();
        assert_eq!(err.to_string(), "batch size 5000 is above the configured maximum of 4096");
    }

    #[test]
    fn a_batch_at_the_maximum_is_accepted_and_serialises_as_a_number() {
        let b = BatchSize::new(4096, 4096).unwrap();
        assert_eq!(b.get(), 4096);
        assert_eq!(serde_json::to_string(&b).unwrap(), "4096");
        assert_eq!(serde_json::from_str::<BatchSize>("1024").unwrap(), BatchSize::DEFAULT);
        assert!(serde_json::from_str::<BatchSize>("0").is_err());
    }

    #[test]
    fn a_peak_multiplier_scales_within_the_maximum() {
        assert_eq!(BatchSize::DEFAULT.scaled(3, 4096).unwrap().get(), 3072);
        assert!(BatchSize::DEFAULT.scaled(5, 4096).is_err());
    }
}
