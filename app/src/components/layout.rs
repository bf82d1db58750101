//! The page frame: header with the signed-in user, navigation, content.

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_location;

use crate::api::{whoami, SessionInfo};

/// The session as the server saw it when rendering the page, shared with every page
/// (which awaits it to decide what to show).
#[derive(Clone, Copy)]
pub struct CurrentSession(pub Resource<Result<Option<SessionInfo>, ServerFnError>>);

/// The path of the sign-in page, the one page open to signed-out visitors.
pub const LOGIN_PATH: &str = "/login";

/// Header with the navigation every page shares. Sets `data-hydrated` on `<body>` once the
/// browser has hydrated the page, so that browser tests (and people) can tell, and a
/// performance mark `tessera-hydrated` (time to interactive).
///
/// The session is looked up on the server while rendering (a blocking resource, so that a
/// signed-out visitor gets a redirect to the sign-in page before any HTML is sent).
#[component]
pub fn Layout(children: Children) -> impl IntoView {
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(body) = document().body() {
            let _ = body.set_attribute("data-hydrated", "true");
            // Time to interactive, for measurements: `performance.getEntriesByName(
            // "tessera-hydrated")[0].startTime` is milliseconds since navigation began.
            if let Some(performance) = window().performance() {
                let _ = performance.mark("tessera-hydrated");
            }
        }
    });
    let session = Resource::new_blocking(|| (), |_| whoami());
    provide_context(CurrentSession(session));
    let location = use_location();
    view! {
        <header class="topbar">
            <a class="brand" href="/">"Tessera"</a>
            // One boundary for all that depends on the session: a second boundary awaiting
            // the same blocking resource now and then hung a streamed page (the 404 page).
            <Suspense fallback=|| view! { <Nav admin=false/> }>
                {move || Suspend::new(async move {
                    let on_login = location.pathname.get_untracked() == LOGIN_PATH;
                    match session.await {
                        Ok(Some(s)) => view! { <Nav admin=s.may_manage_access/> <SignedIn session=s/> }.into_any(),
                        Ok(None) if !on_login => {
                            to_login();
                            view! { <Nav admin=false/> }.into_any()
                        }
                        Ok(None) => view! { <Nav admin=false/> }.into_any(),
                        Err(e) => view! {
                            <Nav admin=false/>
                            <p class="who error" role="alert">"Could not check the session: " {e.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Suspense>
        </header>
        <main class="content">{children()}</main>
    }
}

/// The main navigation; only admins are offered the users and tokens page.
#[component]
fn Nav(admin: bool) -> impl IntoView {
    view! {
        <nav aria-label="Main">
            <A href="/" exact=true>"Dashboard"</A>
            <A href="/pools">"Pools"</A>
            <A href="/routes">"Routes"</A>
            <A href="/channels">"Channels"</A>
            <A href="/tenants">"Tenants"</A>
            <A href="/changes">"Changes"</A>
            <A href="/audit">"Audit"</A>
            {admin.then(|| view! { <A href="/users">"Users"</A> })}
        </nav>
    }
}

/// Sends a signed-out visitor to the sign-in page: a 302 while rendering on the server
/// (the session resource blocks the response until it is known), a navigation in the
/// browser (a session that ended while the page was open).
fn to_login() {
    #[cfg(feature = "ssr")]
    leptos_actix::redirect(LOGIN_PATH);
    #[cfg(feature = "hydrate")]
    {
        let _ = window().location().set_href(LOGIN_PATH);
    }
}

/// Who is signed in, with what role, and the way out.
#[component]
fn SignedIn(session: SessionInfo) -> impl IntoView {
    let csrf = session.csrf_token.clone();
    let failed = RwSignal::new(None::<String>);
    let sign_out = move |_| {
        let _csrf = csrf.clone();
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            let sent = gloo_net::http::Request::post("/api/v1/auth/logout").header("X-CSRF-Token", &_csrf).send().await;
            match sent {
                Ok(r) if r.ok() => {
                    let _ = window().location().set_href(LOGIN_PATH);
                }
                Ok(r) => failed.set(Some(format!("sign-out refused ({})", r.status()))),
                Err(e) => failed.set(Some(format!("the server did not answer: {e}"))),
            }
        });
    };
    view! {
        <div class="who">
            <span>"Signed in as "<strong id="session-user">{session.user}</strong></span>
            <span class="badge role" id="session-role">"role: "{session.role}</span>
            <a href="/account" id="account-link">"Your account"</a>
            <button type="button" id="sign-out" class="secondary" on:click=sign_out>"Sign out"</button>
            {move || failed.get().map(|e| view! { <span class="error" role="alert">{e}</span> })}
        </div>
    }
}
