//! Numbers as every page writes them.

/// A fraction (0.253) as a percentage with `decimals` digits after the point: `25.3 %`.
pub fn percent(fraction: f64, decimals: usize) -> String {
    format!("{:.decimals$} %", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn a_fraction_is_written_as_a_percentage_with_its_digits() {
        assert_eq!(percent(0.253, 1), "25.3 %");
        assert_eq!(percent(0.5, 2), "50.00 %");
        assert_eq!(percent(0.0, 0), "0 %");
    }
}
