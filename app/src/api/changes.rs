//! Change requests as the changes page shows them (the API's own reply type), a page at a
//! time, filtered on the server.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

pub use api::changes::{BreakGlass, ChangeRequest};

use super::lists::{list_href_with, ListPage};

/// Rows per page of the change requests.
pub const CHANGE_PAGE_SIZE: u32 = 25;

/// How the change requests may be sorted: the `sort` value and what the page calls it.
pub const CHANGE_SORTS: [(&str, &str); 2] = [("newest", "Newest first"), ("oldest", "Oldest first")];

/// The changes list's query, as the URL holds it: `q` matches part of what a request
/// changes (`pool:cn-pay`), `state` one of [`api::changes::ChangeState`]'s names, `author` a user's name
/// exactly, `sort` one of [`CHANGE_SORTS`], `page` from 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeQuery {
    pub q: Option<String>,
    pub state: Option<String>,
    pub author: Option<String>,
    pub sort: Option<String>,
    pub page: Option<u32>,
}

/// A page of change requests with the filters as checked (empty: any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeList {
    pub list: ListPage<ChangeRequest>,
    pub state: String,
    pub author: String,
}

impl ChangeList {
    /// The address of `page` with these filters.
    pub fn href(&self, page: u32) -> String {
        let filters = [("state", self.state.as_str()), ("author", self.author.as_str())];
        list_href_with("/changes", &filters, &self.list.q, &self.list.sort, "newest", page)
    }
}

/// A page of change requests, filtered on the server, for any signed-in user. The query's
/// parts are separate optional arguments, so that a query string without them reads as
/// "the first page of every request".
#[server(prefix = "/sfn", endpoint = "change_list", input = GetUrl)]
pub async fn list_change_page(
    q: Option<String>,
    state: Option<String>,
    author: Option<String>,
    sort: Option<String>,
    page: Option<u32>,
) -> Result<ChangeList, ServerFnError> {
    super::session::ssr::require_session().await?;
    let query = ChangeQuery { q, state, author, sort, page };
    super::backend()?.change_list(query).await.map_err(ServerFnError::new)
}

/// The break-glass operations no auditor has acknowledged yet (newest first), for any
/// signed-in user.
#[server(prefix = "/sfn", endpoint = "break_glass", input = GetUrl)]
pub async fn list_break_glass() -> Result<Vec<BreakGlass>, ServerFnError> {
    super::session::ssr::require_session().await?;
    super::backend()?.break_glass().await.map_err(ServerFnError::new)
}
