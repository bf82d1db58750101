//! Tier pools: which tier serves a request when the drawn tier has no available channel.
//!
//! The rule (design.md §3), in order:
//! 1. the drawn tier, if it is available;
//! 2. the only available tier, if exactly one is;
//! 3. the drawn tier's partner if available: G→N, N→G, U→G;
//! 4. otherwise the first available tier in the order G, N, U;
//! 5. nothing, if no tier is available.
//!
//! With three tiers, step 4 is never reached (two available tiers always include the
//! partner), but it is kept so the rule stays total. The Lua scripts mirror this rule;
//! [`tier_fallback_table`] is the whole truth table for them to be generated or checked
//! against.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a tier name was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("tier `{value}` is unknown: expected G (good), N (normal) or U (unqualified)")]
pub struct TierError {
    value: String,
}

/// A traffic tier: good, normal, unqualified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Tier {
    G,
    N,
    U,
}

impl Tier {
    /// All tiers, in the fallback scan order; `available` arrays use this order too.
    pub const ALL: [Tier; 3] = [Tier::G, Tier::N, Tier::U];

    /// Position in [`Tier::ALL`] (and in `available` arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The tier tried first when this one has no available channel.
    pub fn partner(self) -> Tier {
        match self {
            Tier::G => Tier::N,
            Tier::N | Tier::U => Tier::G,
        }
    }

    /// The one-letter code, as stored in tickets.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::G => "G",
            Tier::N => "N",
            Tier::U => "U",
        }
    }
}

impl std::str::FromStr for Tier {
    type Err = TierError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "G" | "g" => Ok(Tier::G),
            "N" | "n" => Ok(Tier::N),
            "U" | "u" => Ok(Tier::U),
            other => Err(TierError { value: other.to_owned() }),
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tier that serves a request that drew `drawn`, given which tiers have an available
/// channel (`available[t.index()]`); `None` when no tier is available.
pub fn fallback(drawn: Tier, available: [bool; 3]) -> Option<Tier> {
    let is = |t: Tier| available[t.index()];
    if is(drawn) {
        return Some(drawn);
    }
    let mut open = Tier::ALL.into_iter().filter(|&t| is(t));
    let first = open.next()?;
    if open.next().is_none() {
        return Some(first);
    }
    if is(drawn.partner()) {
        return Some(drawn.partner());
    }
    Some(first)
}

/// Every `(drawn, available, result)` row: 3 drawn tiers × 8 availability sets, drawn
/// tier major, availability counted as a binary number with G as the high bit.
pub fn tier_fallback_table() -> Vec<(Tier, [bool; 3], Option<Tier>)> {
    let mut rows = Vec::with_capacity(24);
    for drawn in Tier::ALL {
        for bits in 0..8u8 {
            let available = [bits & 4 != 0, bits & 2 != 0, bits & 1 != 0];
            rows.push((drawn, available, fallback(drawn, available)));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use Tier::{G, N, U};

    #[test]
    fn the_whole_truth_table_matches_the_design() {
        // available = [G, N, U]
        #[rustfmt::skip]
        let expected: [(Tier, [bool; 3], Option<Tier>); 24] = [
            (G, [false, false, false], None),
            (G, [false, false, true ], Some(U)),
            (G, [false, true,  false], Some(N)),
            (G, [false, true,  true ], Some(N)),
            (G, [true,  false, false], Some(G)),
            (G, [true,  false, true ], Some(G)),
            (G, [true,  true,  false], Some(G)),
            (G, [true,  true,  true ], Some(G)),
            (N, [false, false, false], None),
            (N, [false, false, true ], Some(U)),
            (N, [false, true,  false], Some(N)),
            (N, [false, true,  true ], Some(N)),
            (N, [true,  false, false], Some(G)),
            (N, [true,  false, true ], Some(G)),
            (N, [true,  true,  false], Some(N)),
            (N, [true,  true,  true ], Some(N)),
            (U, [false, false, false], None),
            (U, [false, false, true ], Some(U)),
            (U, [false, true,  false], Some(N)),
            (U, [false, true,  true ], Some(U)),
            (U, [true,  false, false], Some(G)),
            (U, [true,  false, true ], Some(U)),
            (U, [true,  true,  false], Some(G)),
            (U, [true,  true,  true ], Some(U)),
        ];
        assert_eq!(tier_fallback_table(), expected.to_vec());
    }

    #[test]
    fn the_result_is_always_an_available_tier_or_none_only_when_none_is() {
        for (_, available, result) in tier_fallback_table() {
            match result {
                Some(t) => assert!(available[t.index()]),
                None => assert_eq!(available, [false; 3]),
            }
        }
    }

    #[test]
    fn tiers_parse_and_print_as_one_letter() {
        assert_eq!("n".parse::<Tier>().unwrap(), N);
        assert_eq!(U.to_string(), "U");
        assert_eq!(serde_json::to_string(&G).unwrap(), r#""G""#);
        let err = "X".parse::<Tier>().unwrap_err().to_string();
        assert!(err.contains("`X`"), "{err}");
    }
}
