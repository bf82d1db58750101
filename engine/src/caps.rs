//! Caps on how much one member of a pool serves: per local day (in the pool's snapshot as
//! `caps`) and per short window of minutes ([`WindowCaps`]), enforced by the draw script
//! and replayed by [`crate::replay`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The longest short window, minutes (a day: longer is what the daily caps are for).
pub const MAX_WINDOW_MINUTES: u32 = 1440;

/// Most draws per member in a short window of minutes, besides the daily caps. Windows are
/// aligned to the epoch (a 10-minute window starts at :00, :10, … UTC), so every instance
/// and the draw script agree on which window a draw falls in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowCaps {
    /// The window's length, 1..=[`MAX_WINDOW_MINUTES`] minutes.
    #[serde(deserialize_with = "crate::weights::whole_number")]
    pub minutes: u32,
    /// Most draws per member in one window, by member.
    #[serde(deserialize_with = "crate::weights::whole_number_values")]
    pub caps: BTreeMap<String, u64>,
}

impl WindowCaps {
    /// The window's length in milliseconds.
    pub fn length_ms(&self) -> i64 {
        i64::from(self.minutes) * 60_000
    }

    /// The start (ms since the epoch) of the window holding `at_ms`.
    pub fn window_start(&self, at_ms: i64) -> i64 {
        at_ms - at_ms.rem_euclid(self.length_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let w = WindowCaps { minutes: 10, caps: BTreeMap::new() };
        assert_eq!(w.length_ms(), 600_000);
        assert_eq!(w.window_start(1_200_000), 1_200_000);
        assert_eq!(w.window_start(1_799_999), 1_200_000);
        assert_eq!(w.window_start(-1), -600_000);
        assert!(serde_json::from_value::<WindowCaps>(serde_json::json!({"minutes": 10.0, "caps": {"A": 5}})).is_ok());
        assert!(serde_json::from_value::<WindowCaps>(serde_json::json!({"minutes": 10, "caps": {}, "x": 1})).is_err());
        let whole: WindowCaps =
            serde_json::from_value(serde_json::json!({"minutes": 10, "caps": {"A": 11725.0}})).unwrap();
        assert_eq!(whole.caps["A"], 11725, "a cap written as 11725.0 is the integer JSON Schema says it is");
        assert!(serde_json::from_value::<WindowCaps>(serde_json::json!({"minutes": 10, "caps": {"A": 1.5}})).is_err());
    }
}
