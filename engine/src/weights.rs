//! Validated member weights: an ordered list of (member, integer weight) with its total.
//!
//! Weights arrive as text: integers (`"5"`), decimals (`"0.45"`) or percentages (`"45%"`).
//! Every value is made exact by scaling all of them to one common power-of-ten
//! denominator and then dividing by the largest factor they share with it, so
//! `0.45, 0.30, 0.25` becomes `9, 6, 5` and plain integers are kept exactly as given.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Most decimal places a weight may carry.
pub const MAX_DECIMALS: u32 = 15;

/// Largest total weight, `2^53 − 1`: the Lua scripts mirror weights as doubles, and
/// products of weights and batch sizes stay far inside 128-bit arithmetic.
pub const MAX_TOTAL: u64 = (1 << 53) - 1;

/// Why a list of weights was refused. Every message names the member and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WeightError {
    #[error("a pool needs at least one member; the member list is empty")]
    NoMembers,
    #[error("member #{position} has an empty name; every member needs a name")]
    EmptyName { position: usize },
    #[error("member `{member}` appears more than once; each member may be listed only once")]
    DuplicateMember { member: String },
    #[error("weight of member `{member}` is `{value}`: weights must be zero or positive")]
    Negative { member: String, value: String },
    #[error("weight of member `{member}` is `{value}`: weights must be finite numbers, not NaN or infinity")]
    NotFinite { member: String, value: String },
    #[error("weight of member `{member}` is `{value}`: expected a non-negative integer (5), a decimal (0.45) or a percentage (45%)")]
    Invalid { member: String, value: String },
    #[error("weight of member `{member}` is `{value}`: at most {MAX_DECIMALS} decimal places are allowed")]
    TooPrecise { member: String, value: String },
    #[error("weight of member `{member}` overflows a 64-bit integer once made exact")]
    Overflow { member: String },
    #[error("the total of all weights exceeds {MAX_TOTAL} (2^53 − 1) when adding member `{member}`")]
    TotalOverflow { member: String },
    #[error("every member has weight 0: at least one weight must be positive")]
    AllZero,
    #[error("weight entry `{entry}` is malformed: expected NAME=WEIGHT, entries separated by commas")]
    MalformedSpec { entry: String },
}

/// A validated, ordered list of members with exact integer weights.
///
/// Invariants: at least one member, names non-empty and unique, at least one positive
/// weight, and the total is at most [`MAX_TOTAL`]. The order is the order given; it is the tie-break
/// order everywhere in this crate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<WeightEntry>", into = "Vec<WeightEntry>")]
pub struct Weights {
    members: Vec<String>,
    weights: Vec<u64>,
    total: u64,
}

/// The serialised form of one member of [`Weights`]: `{"member": "A", "weight": 5}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightEntry {
    pub member: String,
    #[serde(deserialize_with = "whole_number")]
    pub weight: u64,
}

/// [`whole_number`] for the values of a map (`{"A": 100, "B": 5.0}`).
pub fn whole_number_values<'de, D>(d: D) -> Result<std::collections::BTreeMap<String, u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    struct Whole(#[serde(deserialize_with = "whole_number")] u64);
    let map = <std::collections::BTreeMap<String, Whole> as serde::Deserialize>::deserialize(d)?;
    Ok(map.into_iter().map(|(k, Whole(v))| (k, v)).collect())
}

/// `#[serde(deserialize_with = "engine::weights::whole_number")]`: an integer that JSON may
/// write as `5` or `5.0` (JSON Schema counts both as the integer 5; serde's own integer
/// types refuse the second). A fraction, or a value outside `T`, is refused.
pub fn whole_number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    use serde::de::{Error, Unexpected};
    struct Whole;
    impl serde::de::Visitor<'_> for Whole {
        type Value = i128;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an integer")
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<i128, E> {
            Ok(v.into())
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<i128, E> {
            Ok(v.into())
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<i128, E> {
            // Integral floats within ±2^64 (every integer type of ours fits).
            let bound = 18_446_744_073_709_551_616.0;
            if v.is_finite() && v.fract() == 0.0 && v.abs() < bound {
                Ok(v as i128)
            } else {
                Err(E::invalid_value(Unexpected::Float(v), &self))
            }
        }
    }
    let v = d.deserialize_any(Whole)?;
    T::try_from(v).map_err(|_| D::Error::custom(format!("invalid value: {v}, expected an integer in range")))
}

impl TryFrom<Vec<WeightEntry>> for Weights {
    type Error = WeightError;
    fn try_from(entries: Vec<WeightEntry>) -> Result<Self, Self::Error> {
        Weights::from_integers(entries.into_iter().map(|e| (e.member, e.weight)))
    }
}

impl From<Weights> for Vec<WeightEntry> {
    fn from(w: Weights) -> Self {
        w.members.into_iter().zip(w.weights).map(|(member, weight)| WeightEntry { member, weight }).collect()
    }
}

/// An exact non-negative decimal: `digits / 10^scale`.
struct Decimal {
    digits: u64,
    scale: u32,
}

fn parse_decimal(member: &str, raw: &str) -> Result<Decimal, WeightError> {
    let value = raw.trim();
    let invalid = || WeightError::Invalid { member: member.to_owned(), value: raw.to_owned() };
    let lower = value.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if matches!(unsigned, "nan" | "inf" | "infinity" | "nan%" | "inf%" | "infinity%") {
        return Err(WeightError::NotFinite { member: member.to_owned(), value: raw.to_owned() });
    }
    if let Some(rest) = value.strip_prefix('-') {
        // "-0" and "-0.0" are zero, which is allowed; anything else below zero is not.
        let is_zero = rest.trim_end_matches('%').chars().all(|c| c == '0' || c == '.');
        if !is_zero || rest.is_empty() {
            return Err(WeightError::Negative { member: member.to_owned(), value: raw.to_owned() });
        }
        return Ok(Decimal { digits: 0, scale: 0 });
    }
    let (number, percent) = match value.strip_suffix('%') {
        Some(n) => (n.trim_end(), true),
        None => (value, false),
    };
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(invalid());
    }
    let frac_part = frac_part.trim_end_matches('0');
    let scale = frac_part.len() as u32 + if percent { 2 } else { 0 };
    if scale > MAX_DECIMALS {
        return Err(WeightError::TooPrecise { member: member.to_owned(), value: raw.to_owned() });
    }
    let overflow = || WeightError::Overflow { member: member.to_owned() };
    let mut digits: u64 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        digits = digits.checked_mul(10).and_then(|d| d.checked_add(u64::from(b - b'0'))).ok_or_else(overflow)?;
    }
    Ok(Decimal { digits, scale })
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Weights {
    /// Validates integer weights as given (no scaling, no reduction).
    pub fn from_integers<S: Into<String>>(members: impl IntoIterator<Item = (S, u64)>) -> Result<Self, WeightError> {
        let mut names = Vec::new();
        let mut weights = Vec::new();
        for (name, weight) in members {
            names.push(name.into());
            weights.push(weight);
        }
        Self::validate(names, weights)
    }

    /// Parses textual weights (`"5"`, `"0.45"`, `"45%"`) into exact integers: all values
    /// are scaled to one common denominator, then reduced by their greatest common factor
    /// with it. Integers alone are kept as given.
    pub fn parse(members: &[(&str, &str)]) -> Result<Self, WeightError> {
        let mut decimals = Vec::with_capacity(members.len());
        for (position, (name, raw)) in members.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(WeightError::EmptyName { position: position + 1 });
            }
            decimals.push(parse_decimal(name.trim(), raw)?);
        }
        let scale = decimals.iter().map(|d| d.scale).max().unwrap_or(0);
        let denominator = 10u64.pow(scale);
        let mut scaled = Vec::with_capacity(decimals.len());
        for ((name, _), d) in members.iter().zip(&decimals) {
            let factor = 10u64.pow(scale - d.scale);
            let v =
                d.digits.checked_mul(factor).ok_or_else(|| WeightError::Overflow { member: name.trim().to_owned() })?;
            scaled.push(v);
        }
        let common = scaled.iter().fold(denominator, |g, &v| gcd(g, v));
        let names = members.iter().map(|(n, _)| n.trim().to_owned()).collect();
        Self::validate(names, scaled.into_iter().map(|v| v / common).collect())
    }

    /// Parses a spec such as `"A=5,B=3,C=2"` or `"A=0.45, B=55%"` (the CLI's form).
    pub fn parse_spec(spec: &str) -> Result<Self, WeightError> {
        let mut pairs = Vec::new();
        for entry in spec.split(',') {
            if entry.trim().is_empty() && spec.trim().is_empty() {
                continue;
            }
            let (name, weight) =
                entry.split_once('=').ok_or_else(|| WeightError::MalformedSpec { entry: entry.trim().to_owned() })?;
            pairs.push((name, weight));
        }
        Self::parse(&pairs)
    }

    fn validate(members: Vec<String>, weights: Vec<u64>) -> Result<Self, WeightError> {
        if members.is_empty() {
            return Err(WeightError::NoMembers);
        }
        let mut total: u64 = 0;
        // Linear in the members: a body of many thousands is checked as fast as it is read.
        let mut seen: HashSet<&str> = HashSet::with_capacity(members.len());
        for (position, (name, &w)) in members.iter().zip(&weights).enumerate() {
            if name.trim().is_empty() {
                return Err(WeightError::EmptyName { position: position + 1 });
            }
            if !seen.insert(name) {
                return Err(WeightError::DuplicateMember { member: name.clone() });
            }
            total = total
                .checked_add(w)
                .filter(|&t| t <= MAX_TOTAL)
                .ok_or_else(|| WeightError::TotalOverflow { member: name.clone() })?;
        }
        if total == 0 {
            return Err(WeightError::AllZero);
        }
        Ok(Self { members, weights, total })
    }

    /// Number of members (zero-weight members included).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a `Weights` has at least one member. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Sum of all weights (always positive).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Member names, in the given order.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Weights, in member order.
    pub fn weights(&self) -> &[u64] {
        &self.weights
    }

    /// Name of member `index`.
    pub fn name(&self, index: usize) -> &str {
        &self.members[index]
    }

    /// Weight of member `index`.
    pub fn weight(&self, index: usize) -> u64 {
        self.weights[index]
    }

    /// Position of a member by name.
    pub fn index_of(&self, member: &str) -> Option<usize> {
        self.members.iter().position(|m| m == member)
    }

    /// `(name, weight)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.members.iter().map(String::as_str).zip(self.weights.iter().copied())
    }

    /// Each member's share of the total, as a float (for reports and metrics only).
    pub fn shares(&self) -> Vec<f64> {
        self.weights.iter().map(|&w| w as f64 / self.total as f64).collect()
    }

    /// The same weights divided by their greatest common divisor (`50:30:20` → `5:3:2`).
    pub fn reduced(&self) -> Weights {
        let g = self.weights.iter().fold(0, |g, &w| gcd(g, w));
        Weights {
            members: self.members.clone(),
            weights: self.weights.iter().map(|w| w / g).collect(),
            total: self.total / g,
        }
    }
}

impl std::fmt::Display for Weights {
    /// Renders the spec form `A=5,B=3,C=2`, which [`Weights::parse_spec`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, w)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_weight_written_as_an_integral_float_is_that_integer() {
        let w: Weights =
            serde_json::from_str(r#"[{"member": "A", "weight": 45.0}, {"member": "B", "weight": 5}]"#).unwrap();
        assert_eq!(pairs(&w), vec![("A", 45), ("B", 5)]);
        assert!(serde_json::from_str::<Weights>(r#"[{"member": "A", "weight": 4.5}]"#).is_err());
        assert!(serde_json::from_str::<Weights>(r#"[{"member": "A", "weight": -1}]"#).is_err());
    }

    fn pairs(w: &Weights) -> Vec<(&str, u64)> {
        w.iter().collect()
    }

    #[test]
    fn integers_are_kept_exactly_as_given() {
        let w = Weights::parse(&[("A", "50"), ("B", "30"), ("C", "20")]).unwrap();
        assert_eq!(pairs(&w), vec![("A", 50), ("B", 30), ("C", 20)]);
        assert_eq!(w.total(), 100);
    }

    #[test]
    fn decimals_are_scaled_to_a_common_denominator_and_reduced() {
        let w = Weights::parse(&[("A", "0.45"), ("B", "0.30"), ("C", "0.25")]).unwrap();
        assert_eq!(pairs(&w), vec![("A", 9), ("B", 6), ("C", 5)]);
    }

    #[test]
    fn percentages_mean_hundredths_and_mix_with_decimals() {
        let w = Weights::parse(&[("A", "45%"), ("B", "0.55")]).unwrap();
        assert_eq!(pairs(&w), vec![("A", 9), ("B", 11)]);
        let w = Weights::parse(&[("A", "12.5%"), ("B", "87.5 %")]).unwrap();
        assert_eq!(pairs(&w), vec![("A", 1), ("B", 7)]);
    }

    #[test]
    fn a_decimal_beside_an_integer_keeps_the_ratio_exact() {
        let w = Weights::parse(&[("A", "1"), ("B", "0.5"), ("C", "0")]).unwrap();
        assert_eq!(pairs(&w), vec![("A", 2), ("B", 1), ("C", 0)]);
    }

    #[test]
    fn a_spec_string_parses_like_the_cli_writes_it() {
        let w = Weights::parse_spec("A=5, B=3 ,C=2").unwrap();
        assert_eq!(pairs(&w), vec![("A", 5), ("B", 3), ("C", 2)]);
        assert_eq!(w.to_string(), "A=5,B=3,C=2");
        assert!(matches!(
            Weights::parse_spec("A=5,B"),
            Err(WeightError::MalformedSpec { entry }) if entry == "B"
        ));
    }

    #[test]
    fn each_bad_input_is_refused_with_a_message_naming_the_member() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![], "member list is empty"),
            (vec![("A", "-1")], "`A`"),
            (vec![("A", "1"), ("B", "NaN")], "`B`"),
            (vec![("A", "inf")], "`A`"),
            (vec![("A", "0"), ("B", "0.0")], "at least one weight must be positive"),
            (vec![("A", "1"), ("A", "2")], "`A` appears more than once"),
            (vec![("A", "99999999999999999999")], "`A` overflows"),
            (vec![("A", "1e3")], "`A`"),
            (vec![("A", "0.0000000000000001")], "`A`"),
            (vec![("A", "9007199254740991"), ("B", "1")], "`B`"),
            (vec![("", "1")], "member #1"),
        ];
        for (input, expected) in cases {
            let err = Weights::parse(&input).unwrap_err().to_string();
            assert!(err.contains(expected), "{input:?}: `{err}` lacks `{expected}`");
        }
    }

    #[test]
    fn negative_zero_is_just_zero() {
        let w = Weights::parse(&[("A", "-0"), ("B", "1")]).unwrap();
        assert_eq!(w.weight(0), 0);
    }

    #[test]
    fn serde_goes_through_validation() {
        let w = Weights::parse_spec("A=5,B=3").unwrap();
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, r#"[{"member":"A","weight":5},{"member":"B","weight":3}]"#);
        assert_eq!(serde_json::from_str::<Weights>(&json).unwrap(), w);
        let bad = r#"[{"member":"A","weight":0}]"#;
        assert!(serde_json::from_str::<Weights>(bad).unwrap_err().to_string().contains("positive"));
    }

    proptest! {
        #[test]
        fn parsed_decimals_keep_the_exact_ratios(raw in prop::collection::vec((0u64..10_000, 0u32..4), 1..6)) {
            prop_assume!(raw.iter().any(|(d, _)| *d > 0));
            let names: Vec<String> = (0..raw.len()).map(|i| format!("m{i}")).collect();
            let texts: Vec<String> = raw.iter().map(|&(d, s)| {
                let p = 10u64.pow(s);
                format!("{}.{:0width$}", d / p, d % p, width = s as usize)
            }).collect();
            let input: Vec<(&str, &str)> = names.iter().map(String::as_str).zip(texts.iter().map(String::as_str)).collect();
            let w = Weights::parse(&input).unwrap();
            // value_i / value_j == w_i / w_j, compared exactly via cross-multiplication over 10^4.
            for i in 0..raw.len() {
                for j in 0..raw.len() {
                    let vi = u128::from(raw[i].0) * 10u128.pow(4 - raw[i].1);
                    let vj = u128::from(raw[j].0) * 10u128.pow(4 - raw[j].1);
                    prop_assert_eq!(vi * u128::from(w.weight(j)), vj * u128::from(w.weight(i)));
                }
            }
        }
    }
}
