//! What the UI's lists share: the search text and the page number checked (errors name
//! the field), and the number of pages.

use app::api::lists::MAX_SEARCH;
use app::api::BackendError;

/// The search as typed, trimmed: at most [`MAX_SEARCH`] characters, no control characters.
pub(super) fn search(q: Option<String>) -> Result<String, BackendError> {
    let q = q.as_deref().map(str::trim).unwrap_or_default().to_owned();
    if q.chars().count() > MAX_SEARCH {
        return Err(BackendError::invalid("q", format!("must be at most {MAX_SEARCH} characters")));
    }
    if q.chars().any(char::is_control) {
        return Err(BackendError::invalid("q", "must not hold control characters"));
    }
    Ok(q)
}

/// The page asked for (1 when none).
pub(super) fn page(page: Option<u32>) -> Result<u32, BackendError> {
    match page.unwrap_or(1) {
        p @ 1..=1_000_000 => Ok(p),
        _ => Err(BackendError::invalid("page", "must be between 1 and 1000000")),
    }
}

/// The sort asked for, one of `known` (the first when none).
pub(super) fn sort(sort: Option<String>, known: &[(&str, &str)]) -> Result<String, BackendError> {
    let sort = sort.unwrap_or_else(|| known[0].0.to_owned());
    if known.iter().any(|(value, _)| *value == sort) {
        return Ok(sort);
    }
    let names: Vec<&str> = known.iter().map(|(v, _)| *v).collect();
    Err(BackendError::invalid("sort", format!("must be one of {}", names.join(", "))))
}

/// How many pages `total` rows fill, at least 1.
pub(super) fn pages(total: u64, size: u32) -> u32 {
    u32::try_from(total.div_ceil(u64::from(size)).max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_query_is_checked_naming_its_field() {
        assert_eq!(search(Some("  acme ".into())).unwrap(), "acme");
        assert!(
            matches!(search(Some("x".repeat(MAX_SEARCH + 1))), Err(BackendError::Invalid { field, .. }) if field == "q")
        );
        assert!(matches!(search(Some("a\u{7}".into())), Err(BackendError::Invalid { field, .. }) if field == "q"));
        assert_eq!(page(None).unwrap(), 1);
        assert!(matches!(page(Some(0)), Err(BackendError::Invalid { field, .. }) if field == "page"));
        let known = [("code", "Code"), ("name", "Name")];
        assert_eq!(sort(None, &known).unwrap(), "code");
        assert!(
            matches!(sort(Some("size".into()), &known), Err(BackendError::Invalid { field, rule }) if field == "sort" && rule.contains("code, name"))
        );
        assert_eq!(pages(0, 50), 1);
        assert_eq!(pages(5002, 50), 101);
    }
}
