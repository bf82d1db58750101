//! Exact decimal amounts for routing conditions: `1000`, `999.99`, `-12.5`, compared
//! exactly (no floating point), so a boundary such as `amount < 1000` splits `999.99` and
//! `1000` the same way on the server, in the client and in the browser.

use std::fmt;

/// Most digits before the decimal point.
pub const MAX_INTEGER_DIGITS: usize = 20;

/// Most digits after the decimal point.
pub const MAX_FRACTION_DIGITS: usize = 18;

const SCALE: i128 = 1_000_000_000_000_000_000; // 10^18

/// An exact decimal: the value times 10^18, so every amount of at most
/// [`MAX_INTEGER_DIGITS`] and [`MAX_FRACTION_DIGITS`] digits is held exactly and two
/// amounts compare as integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Amount(i128);

impl Amount {
    /// Parses `-?digits[.digits]` (no exponent, no spaces, no `+`), naming the rule it
    /// breaks.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (negative, unsigned) = match raw.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, raw),
        };
        let (whole, fraction) = match unsigned.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (unsigned, None),
        };
        let is_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !is_digits(whole) || fraction.is_some_and(|f| !is_digits(f)) {
            return Err(format!("{raw:?} is not a decimal number such as 1000 or 999.99"));
        }
        let whole = whole.trim_start_matches('0');
        let fraction = fraction.unwrap_or("").trim_end_matches('0');
        if whole.len() > MAX_INTEGER_DIGITS {
            return Err(format!("{raw:?} has more than {MAX_INTEGER_DIGITS} digits before the decimal point"));
        }
        if fraction.len() > MAX_FRACTION_DIGITS {
            return Err(format!("{raw:?} has more than {MAX_FRACTION_DIGITS} digits after the decimal point"));
        }
        let whole_value: i128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| format!("{raw:?}"))? };
        let mut fraction_value: i128 = 0;
        for (i, b) in fraction.bytes().enumerate() {
            fraction_value += i128::from(b - b'0') * 10i128.pow((MAX_FRACTION_DIGITS - 1 - i) as u32);
        }
        let value = whole_value * SCALE + fraction_value;
        Ok(Self(if negative { -value } else { value }))
    }

    /// The amount as an `f64` (for display and charts only; never for comparisons).
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / SCALE as f64
    }
}

impl fmt::Display for Amount {
    /// The shortest exact form: `1000`, `999.99`, `-0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let magnitude = self.0.unsigned_abs();
        let scale = SCALE as u128;
        let (whole, fraction) = (magnitude / scale, magnitude % scale);
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let digits = format!("{fraction:018}");
        write!(f, "{sign}{whole}.{}", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn amounts_compare_exactly_across_the_boundary() {
        let a = |s: &str| Amount::parse(s).unwrap();
        assert!(a("999.99") < a("1000"));
        assert!(a("999.999999999999999999") < a("1000"));
        assert_eq!(a("1000"), a("1000.000"));
        assert_eq!(a("0001000.50"), a("1000.5"));
        assert!(a("-0.01") < a("0"));
        assert_eq!(a("-0"), a("0"));
        assert_eq!(a("1000.5").to_string(), "1000.5");
        assert_eq!(a("-12.340").to_string(), "-12.34");
        assert_eq!(a("99999999999999999999.999999999999999999").to_string(), "99999999999999999999.999999999999999999");
    }

    #[test]
    fn malformed_and_oversized_amounts_are_refused_with_the_rule() {
        for bad in ["", "-", "1e3", "+5", " 5", "1.", ".5", "1,000", "NaN", "--1", "1.2.3"] {
            assert!(Amount::parse(bad).unwrap_err().contains("not a decimal"), "{bad}");
        }
        assert!(Amount::parse("123456789012345678901").unwrap_err().contains("before the decimal point"));
        assert!(Amount::parse("0.1234567890123456789").unwrap_err().contains("after the decimal point"));
    }

    proptest! {
        #[test]
        fn an_amount_reads_back_as_it_prints(whole in 0u64..u64::MAX, cents in 0u32..100, negative: bool) {
            let text = format!("{}{whole}.{cents:02}", if negative { "-" } else { "" });
            let amount = Amount::parse(&text).unwrap();
            prop_assert_eq!(Amount::parse(&amount.to_string()).unwrap(), amount);
        }

        #[test]
        fn order_follows_the_integers_in_cents(a in -1_000_000_000i64..1_000_000_000, b in -1_000_000_000i64..1_000_000_000) {
            let text = |c: i64| format!("{}{}.{:02}", if c < 0 { "-" } else { "" }, c.unsigned_abs() / 100, c.unsigned_abs() % 100);
            prop_assert_eq!(Amount::parse(&text(a)).unwrap().cmp(&Amount::parse(&text(b)).unwrap()), a.cmp(&b));
        }
    }
}
