//! The frame of a page about one thing of a list (a pool, a channel, a route): the link
//! back to the list, then, once read, the thing, or "Unknown …" naming what was asked for,
//! or why it could not be read. The pages differ only in what they show of the thing.

use std::sync::Arc;

use leptos::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::layout::CurrentSession;
use crate::api::SessionInfo;

/// What a detail page shows of the thing it found, for the signed-in person.
pub type ShowFound<T> = Arc<dyn Fn(T, Option<SessionInfo>) -> AnyView + Send + Sync>;

/// `list`: the list's path (`/pools`); `plural` and `kind`: what it lists and what one is
/// called (`pools`, `pool`); `name`: the name asked for; `found`: the thing as read.
#[component]
pub fn DetailPage<T>(
    list: &'static str,
    plural: &'static str,
    kind: &'static str,
    name: Signal<String>,
    found: Resource<Result<Option<T>, ServerFnError>>,
    show: ShowFound<T>,
) -> impl IntoView
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    let session = expect_context::<CurrentSession>().0;
    view! {
        <p><a href=list>{format!("← All {plural}")}</a></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let show = show.clone();
                Suspend::new(async move {
                    let session = session.await.ok().flatten();
                    match found.await {
                        Ok(Some(thing)) => show(thing, session),
                        Ok(None) => view! {
                            <h1>{format!("Unknown {kind}")}</h1>
                            <p>{format!("There is no {kind} ")} <code>{name.get_untracked()}</code> "."</p>
                        }
                        .into_any(),
                        Err(e) => view! {
                            <p class="error" role="alert">{format!("Could not load the {kind}: {e}")}</p>
                        }
                        .into_any(),
                    }
                })
            }}
        </Suspense>
    }
}
