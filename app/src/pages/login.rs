//! Sign-in. The browser posts the name and password to `/api/v1/auth/login`, the REST
//! endpoint every client uses (one implementation of throttling, lock-out and the
//! session cookie); the server answers with the HttpOnly session cookie, and the next
//! page load finds the session on the server.

use leptos::prelude::*;

/// Where to go once signed in: `next` when it is a path of this site (`/…`, never `//…`
/// or `/\…`, which browsers take as another host), else the dashboard.
pub fn after_sign_in(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/\\") && !n.contains(['\r', '\n']) => {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// The sign-in form. Its controls are disabled until the page has hydrated, so that a
/// press before then cannot send the password anywhere as a plain form would. Signed in,
/// it goes to the page the visitor was sent here from (`?next=`), or the dashboard.
#[component]
pub fn Login() -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        error.set(None);
        let (_n, _p) = (name.get_untracked(), password.get_untracked());
        let _to = query.with_untracked(|q| after_sign_in(q.get("next").as_deref()));
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            match sign_in(_n, _p).await {
                Ok(()) => {
                    let _ = window().location().set_href(&_to);
                }
                Err(e) => {
                    error.set(Some(e));
                    busy.set(false);
                }
            }
        });
    };
    view! {
        <h1>"Sign in"</h1>
        <form class="card login" id="login-form" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <label for="login-name">"User name"</label>
                <input
                    id="login-name"
                    name="name"
                    type="text"
                    autocomplete="username"
                    required
                    prop:value=move || name.get()
                    on:input=move |ev| name.set(event_target_value(&ev))
                />
                <label for="login-password">"Password"</label>
                <input
                    id="login-password"
                    name="password"
                    type="password"
                    autocomplete="current-password"
                    required
                    prop:value=move || password.get()
                    on:input=move |ev| password.set(event_target_value(&ev))
                />
                <button type="submit" id="login-submit">"Sign in"</button>
            </fieldset>
            <p id="login-error" class="error" role="alert" aria-live="assertive">{move || error.get()}</p>
        </form>
    }
}

/// Posts the credentials; `Err` holds the sentence to show.
#[cfg(feature = "hydrate")]
async fn sign_in(name: String, password: String) -> Result<(), String> {
    let request = gloo_net::http::Request::post("/api/v1/auth/login")
        .json(&serde_json::json!({ "name": name, "password": password }))
        .map_err(|e| format!("could not send the sign-in: {e}"))?;
    let response = request.send().await.map_err(|e| format!("the server did not answer: {e}"))?;
    if response.ok() {
        return Ok(());
    }
    let status = response.status();
    let message = response
        .json::<serde_json::Value>()
        .await
        .ok()
        .and_then(|b| b.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| format!("the server answered {status}"));
    Err(format!("Sign-in failed: {message}"))
}

#[cfg(test)]
mod tests {
    use super::after_sign_in;

    #[test]
    fn only_a_path_of_this_site_is_followed_after_sign_in() {
        for (next, to) in [
            (Some("/audit"), "/audit"),
            (Some("/pools/cn-pay?tab=limits"), "/pools/cn-pay?tab=limits"),
            (None, "/"),
            (Some(""), "/"),
            (Some("https://evil.example/"), "/"),
            (Some("//evil.example/"), "/"),
            (Some("/\\evil.example/"), "/"),
            (Some("javascript:alert(1)"), "/"),
            (Some("/a\r\nSet-Cookie: x"), "/"),
        ] {
            assert_eq!(after_sign_in(next), to, "{next:?}");
        }
    }
}
