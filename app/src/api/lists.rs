//! What the lists searched, sorted and paged on the server share: the query as the URL
//! holds it, a page of rows, and the address of another page.

use serde::{Deserialize, Serialize};

/// The longest search text.
pub const MAX_SEARCH: usize = 100;

/// A list's query, as the URL holds it: `q` (a search), `sort` (one of the list's sorts)
/// and `page` (from 1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    pub q: Option<String>,
    pub sort: Option<String>,
    pub page: Option<u32>,
}

/// A page of a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage<T> {
    pub rows: Vec<T>,
    /// Rows matching the search, on every page.
    pub total: u64,
    /// This page (from 1) and the number of pages (at least 1).
    pub page: u32,
    pub pages: u32,
    /// The search and the sort as checked.
    pub q: String,
    pub sort: String,
}

impl<T> ListPage<T> {
    /// The address of `page` of the list at `path`, with this search and sort.
    pub fn href(&self, path: &str, default_sort: &str, page: u32) -> String {
        list_href_with(path, &[], &self.q, &self.sort, default_sort, page)
    }
}

/// `path?q=…&sort=…&page=…`, leaving out what is empty or the default.
pub fn list_href(path: &str, q: &str, sort: &str, default_sort: &str, page: u32) -> String {
    list_href_with(path, &[], q, sort, default_sort, page)
}

/// `path?name=value&…&q=…&sort=…&page=…` for a list with filters of its own besides the
/// search (`filters`: name and value, those with an empty value left out).
pub fn list_href_with(
    path: &str,
    filters: &[(&str, &str)],
    q: &str,
    sort: &str,
    default_sort: &str,
    page: u32,
) -> String {
    let mut parts: Vec<String> = filters
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| format!("{name}={}", super::encode_query_value(value)))
        .collect();
    if !q.is_empty() {
        parts.push(format!("q={}", super::encode_query_value(q)));
    }
    if sort != default_sort {
        parts.push(format!("sort={}", super::encode_query_value(sort)));
    }
    if page > 1 {
        parts.push(format!("page={page}"));
    }
    if parts.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_address_keeps_only_what_differs_from_the_defaults() {
        assert_eq!(list_href("/tenants", "", "name", "name", 1), "/tenants");
        assert_eq!(list_href("/tenants", "a b&c", "plan", "name", 3), "/tenants?q=a%20b%26c&sort=plan&page=3");
        assert_eq!(
            list_href_with("/changes", &[("state", "in_review"), ("author", "")], "cn", "newest", "newest", 2),
            "/changes?state=in_review&q=cn&page=2"
        );
    }
}
