//! Numbers as every page writes them.

/// A fraction (0.253) as a percentage with `decimals` digits after the point: `25.3 %`.
pub fn percent(fraction: f64, decimals: usize) -> String {
    points(fraction * 100.0, decimals)
}

/// A value already in percent (25.3) written as [`percent`] writes a fraction.
pub fn points(percent: f64, decimals: usize) -> String {
    format!("{percent:.decimals$} %")
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn a_fraction_is_written_as_a_percentage_with_its_digits() {
        assert_eq!(percent(0.253, 1), "25.3 %");
        assert_eq!(percent(0.5, 2), "50.00 %");
        assert_eq!(percent(0.0, 0), "0 %");
        assert_eq!(
            super::points(0.85, 1),
            format!("{:.1} %", 0.85),
            "a value in percent is not divided and multiplied back"
        );
    }
}
