//! What the lists searched, sorted and paged on the server share: the search form (a plain
//! GET of the list's path, so the URL holds the query), the sentence that says what is
//! shown, and the links to the pages before and after.

use leptos::prelude::*;

use crate::api::lists::{ListQuery, MAX_SEARCH};
use crate::components::charts::grouped;

/// The list query a page's URL holds (`q`, `sort`, `page`; an empty value as none, a page
/// that is not a number as the first).
pub fn query_of(params: &leptos_router::params::ParamsMap) -> ListQuery {
    ListQuery {
        q: params.get("q").filter(|q| !q.is_empty()),
        sort: params.get("sort").filter(|s| !s.is_empty()),
        page: params.get("page").and_then(|n| n.parse().ok()),
    }
}

/// The search form of the list at `path`; `id` prefixes its fields' ids (`{id}-search`,
/// `{id}-sort`), `label` says what the text is matched against; `children` are the list's
/// own filters, placed after the search.
#[component]
pub fn SearchForm(
    path: &'static str,
    id: &'static str,
    label: &'static str,
    aria_label: &'static str,
    q: String,
    sort: String,
    sorts: &'static [(&'static str, &'static str)],
    #[prop(optional)] children: Option<Children>,
) -> impl IntoView {
    view! {
        <form class="card filters" method="get" action=path role="search" aria-label=aria_label>
            <label>{label} " "
                <input type="search" name="q" id=format!("{id}-search") value=q maxlength=MAX_SEARCH.to_string()/>
            </label>
            {children.map(|c| c())}
            <label>"Sort by "
                <select name="sort" id=format!("{id}-sort")>
                    {sorts.iter().map(|(value, text)| view! {
                        <option value=*value selected=*value == sort.as_str()>{*text}</option>
                    }).collect_view()}
                </select>
            </label>
            <button type="submit">"Search"</button>
            " " <a href=path>"Clear"</a>
        </form>
    }
}

/// "5,002 tenants matching "t01"; page 1 of 101".
pub fn summary(total: u64, noun: &str, q: &str, page: u32, pages: u32) -> String {
    format!(
        "{} {noun}{}{}; page {page} of {pages}",
        grouped(total),
        if total == 1 { "" } else { "s" },
        if q.is_empty() { String::new() } else { format!(" matching \"{q}\"") },
    )
}

/// The addresses (`href` of a page number) of the pages before and after `page` of
/// `pages`, where there are such pages.
pub fn neighbours(page: u32, pages: u32, href: impl Fn(u32) -> String) -> (Option<String>, Option<String>) {
    ((page > 1).then(|| href(page - 1)), (page < pages).then(|| href(page + 1)))
}

/// The links to the previous and the next page (`{id}-previous`, `{id}-next`), where
/// there are such pages.
#[component]
pub fn Paging(id: &'static str, previous: Option<String>, next: Option<String>) -> impl IntoView {
    view! {
        <nav class="paging" aria-label="Pages">
            {previous.map(|href| view! { <a id=format!("{id}-previous") rel="prev" href=href>"Previous page"</a> })}
            " "
            {next.map(|href| view! { <a id=format!("{id}-next") rel="next" href=href>"Next page"</a> })}
        </nav>
    }
}

#[cfg(test)]
mod tests {
    use super::{neighbours, summary};

    #[test]
    fn a_page_links_to_the_pages_around_it_that_exist() {
        let href = |n: u32| format!("/p?page={n}");
        assert_eq!(neighbours(1, 1, href), (None, None));
        assert_eq!(neighbours(1, 3, href), (None, Some("/p?page=2".into())));
        assert_eq!(neighbours(3, 3, href), (Some("/p?page=2".into()), None));
    }

    #[test]
    fn the_summary_says_how_many_match_and_which_page() {
        assert_eq!(summary(5002, "tenant", "", 1, 101), "5,002 tenants; page 1 of 101");
        assert_eq!(summary(1, "channel", "bulk", 1, 1), "1 channel matching \"bulk\"; page 1 of 1");
    }
}
