//! The UI's lists of pools, users and change requests, searched, sorted and paged on the
//! server, and what every list shares: the search text and the page number checked (errors
//! name the field), and the number of pages.

use api::changes::ChangeState;
use app::api::access::{USER_PAGE_SIZE, USER_SORTS};
use app::api::changes::{ChangeList, ChangeQuery, CHANGE_PAGE_SIZE, CHANGE_SORTS};
use app::api::lists::{ListPage, ListQuery, MAX_SEARCH};
use app::api::pools::{PoolList, POOL_PAGE_SIZE, POOL_SORTS};
use app::api::{BackendError, PoolListing, UserView};
use chrono::Utc;

use super::{minute, unavailable};
use crate::approvals::list::store::{list_request_page, RequestFilter};
use crate::state::AppState;

/// The search as typed, trimmed: at most [`MAX_SEARCH`] characters, no control characters.
pub(super) fn search(q: Option<String>) -> Result<String, BackendError> {
    text("q", q)
}

/// A filter's text as typed, trimmed: at most [`MAX_SEARCH`] characters, no control
/// characters; an error names `field`.
fn text(field: &str, value: Option<String>) -> Result<String, BackendError> {
    let value = value.as_deref().map(str::trim).unwrap_or_default().to_owned();
    if value.chars().count() > MAX_SEARCH {
        return Err(BackendError::invalid(field, format!("must be at most {MAX_SEARCH} characters")));
    }
    if value.chars().any(char::is_control) {
        return Err(BackendError::invalid(field, "must not hold control characters"));
    }
    Ok(value)
}

/// Page `page` of `rows` (already searched and sorted), `size` rows a page; a page past
/// the last is the last.
pub(super) fn page_of<T>(rows: Vec<T>, page: u32, size: u32, q: String, sort: String) -> ListPage<T> {
    let total = rows.len() as u64;
    let last = pages(total, size);
    let page = page.min(last);
    let rows = rows.into_iter().skip((page as usize - 1) * size as usize).take(size as usize).collect();
    ListPage { rows, total, page, pages: last, q, sort }
}

/// Whether `haystack` holds `needle` (already lower case), in any case.
pub(super) fn holds(haystack: &str, needle: &str) -> bool {
    needle.is_empty() || haystack.to_lowercase().contains(needle)
}

/// A page of pools whose name holds the search.
pub(super) async fn pools(state: &AppState, query: ListQuery) -> Result<PoolList, BackendError> {
    let q = search(query.q)?;
    let sort = sort(query.sort, &POOL_SORTS)?;
    let page = page(query.page)?;
    let needle = q.to_lowercase();
    let mut rows: Vec<PoolListing> = crate::pools::store::list_pools(&state.db)
        .await
        .map_err(unavailable)?
        .into_iter()
        .filter(|p| holds(&p.name, &needle))
        .map(|p| PoolListing {
            name: p.name,
            kind: p.kind,
            version: p.version,
            published_version: p.published_version,
            members: p.members,
            ejected: p.ejected,
        })
        .collect();
    match sort.as_str() {
        "kind" => rows.sort_by(|a, b| a.kind.cmp(&b.kind).then_with(|| a.name.cmp(&b.name))),
        "members" => rows.sort_by(|a, b| b.members.cmp(&a.members).then_with(|| a.name.cmp(&b.name))),
        "out" => rows.sort_by(|a, b| b.ejected.cmp(&a.ejected).then_with(|| a.name.cmp(&b.name))),
        _ => rows.sort_by(|a, b| a.name.cmp(&b.name)),
    }
    Ok(page_of(rows, page, POOL_PAGE_SIZE, q, sort))
}

/// A page of users whose name or role holds the search.
pub(super) async fn users(state: &AppState, query: ListQuery) -> Result<ListPage<UserView>, BackendError> {
    let q = search(query.q)?;
    let sort = sort(query.sort, &USER_SORTS)?;
    let page = page(query.page)?;
    let needle = q.to_lowercase();
    let mut users: Vec<_> = crate::access::store::list_users(&state.db)
        .await
        .map_err(unavailable)?
        .into_iter()
        .filter(|u| holds(&u.name, &needle) || holds(&u.role, &needle))
        .collect();
    match sort.as_str() {
        "role" => users.sort_by(|a, b| a.role.cmp(&b.role).then_with(|| a.name.cmp(&b.name))),
        "created" => users.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.name.cmp(&b.name))),
        _ => users.sort_by(|a, b| a.name.cmp(&b.name)),
    }
    let now = Utc::now();
    let rows = users
        .into_iter()
        .map(|u| UserView {
            created_at: minute(u.created_at),
            disabled_at: u.disabled_at.map(minute),
            // A lock that is over is no lock.
            locked_until: u.locked_until.filter(|t| *t > now).map(minute),
            can_sign_in: u.can_sign_in,
            name: u.name,
            role: u.role,
        })
        .collect();
    Ok(page_of(rows, page, USER_PAGE_SIZE, q, sort))
}

/// A page of change requests, filtered and paged in Postgres.
pub(super) async fn changes(state: &AppState, query: ChangeQuery) -> Result<ChangeList, BackendError> {
    let q = search(query.q)?;
    let sort = sort(query.sort, &CHANGE_SORTS)?;
    let page = page(query.page)?;
    let wanted_state = text("state", query.state)?;
    if !wanted_state.is_empty() && ChangeState::parse(&wanted_state).is_none() {
        let names = ChangeState::names(&ChangeState::ALL).join(", ");
        return Err(BackendError::invalid("state", format!("must be one of {names}")));
    }
    let author = text("author", query.author)?;
    if !author.is_empty() {
        api::UserName::parse(&author).map_err(|e| BackendError::invalid("author", e.rule))?;
    }
    let non_empty = |s: &str| (!s.is_empty()).then_some(s.to_owned());
    let (state_filter, author_filter, contains) = (non_empty(&wanted_state), non_empty(&author), non_empty(&q));
    let filter = RequestFilter {
        state: state_filter.as_deref(),
        entity: None,
        author: author_filter.as_deref(),
        entity_contains: contains.as_deref(),
    };
    let size = i64::from(CHANGE_PAGE_SIZE);
    let read = |page: u32| list_request_page(&state.db, &filter, sort == "oldest", size, (i64::from(page) - 1) * size);
    let (mut rows, total) = read(page).await.map_err(unavailable)?;
    let total = u64::try_from(total).unwrap_or_default();
    let last = pages(total, CHANGE_PAGE_SIZE);
    // A page past the last (the list shrank, or the address was typed) shows the last.
    let page = if page > last {
        rows = read(last).await.map_err(unavailable)?.0;
        last
    } else {
        page
    };
    let list = ListPage { rows, total, page, pages: last, q, sort };
    Ok(ChangeList { list, state: wanted_state, author })
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
        let third = page_of((1..=7).collect(), 3, 3, String::new(), "name".into());
        assert_eq!((third.rows, third.page, third.pages, third.total), (vec![7], 3, 3, 7));
        let past = page_of((1..=7).collect(), 9, 3, String::new(), "name".into());
        assert_eq!((past.rows, past.page), (vec![7], 3), "a page past the last is the last");
        assert_eq!(page_of(Vec::<u8>::new(), 2, 3, String::new(), "name".into()).page, 1);
    }
}
