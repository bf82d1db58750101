//! A person's own account: change their password (their other sessions end) and sign out
//! everywhere (every session ends, this one too: a lost laptop, a shared screen). Both go
//! to the REST API (`/api/v1/auth/password`, `/api/v1/auth/logout_everywhere`), which
//! audits them; a token has no account, and the server says so.

use leptos::prelude::*;

use crate::api::rest::Refusal;
use crate::components::form::Field;
use crate::components::layout::CurrentSession;

/// The signed-in person's account.
#[component]
pub fn Account() -> impl IntoView {
    let session = expect_context::<CurrentSession>().0;
    view! {
        <h1>"Your account"</h1>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match session.await.ok().flatten() {
                    Some(s) => {
                        let csrf = StoredValue::new(s.csrf_token.clone());
                        view! {
                            <p id="account-who">"Signed in as " <strong>{s.user.clone()}</strong> " (role " {s.role.clone()} ")."</p>
                            <ChangePassword csrf/>
                            <SignOutEverywhere csrf/>
                        }
                        .into_any()
                    }
                    None => ().into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

/// The rules the server applies to a new password, checked before sending.
fn check_new_password(current: &str, new: &str, again: &str) -> Result<(), Refusal> {
    if current.is_empty() {
        return Err(Refusal::field("current", "is required: type the password you signed in with"));
    }
    let n = new.chars().count();
    if !(12..=256).contains(&n) {
        return Err(Refusal::field("new", format!("must be 12 to 256 characters; got {n}")));
    }
    if new != again {
        return Err(Refusal::field("again", "differs from the new password"));
    }
    Ok(())
}

#[component]
fn ChangePassword(csrf: StoredValue<String>) -> impl IntoView {
    // Read by the browser's writes only.
    let _ = csrf;
    let current = RwSignal::new(String::new());
    let new = RwSignal::new(String::new());
    let again = RwSignal::new(String::new());
    let error = RwSignal::new(None::<Refusal>);
    let done = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (c, n, a) = (current.get_untracked(), new.get_untracked(), again.get_untracked());
        done.set(None);
        if let Err(refusal) = check_new_password(&c, &n, &a) {
            error.set(Some(refusal));
            return;
        }
        busy.set(true);
        error.set(None);
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            let body = serde_json::json!({ "current": c, "new": n });
            match crate::api::rest::send("POST", "/api/v1/auth/password", &csrf.get_value(), &body).await {
                Ok(reply) => {
                    let ended = reply["sessions_ended"].as_u64().unwrap_or(0);
                    done.set(Some(format!(
                        "Password changed. {ended} other session{} ended; this one goes on.",
                        if ended == 1 { "" } else { "s" }
                    )));
                    for field in [current, new, again] {
                        field.set(String::new());
                    }
                }
                // The server names the field in its text ("current: …"): shown beside it.
                Err(refusal) => error.set(Some(match refusal.text.strip_prefix("current: ") {
                    Some(rest) if refusal.field.is_none() => Refusal::field("current", rest),
                    _ => refusal,
                })),
            }
            busy.set(false);
        });
    };
    let field_error = move |field: &'static str| Signal::derive(move || error.get().and_then(|r| r.about(field)));
    let other_error = move || {
        error.get().filter(|r| !matches!(r.field.as_deref(), Some("current" | "new" | "again"))).map(|r| r.text)
    };
    view! {
        <section class="card" aria-labelledby="password-heading">
            <h2 id="password-heading">"Change your password"</h2>
            <p>"Your other sessions end; this one goes on."</p>
            <form id="password-form" class="inline-form form-grid" on:submit=submit>
                <fieldset disabled=move || !hydrated.get() || busy.get()>
                    <legend class="visually-hidden">"Change your password"</legend>
                    <Field id="password-current" label="Current password" error=field_error("current")>
                        <input id="password-current" type="password" maxlength="256" autocomplete="current-password"
                            aria-describedby="password-current-error"
                            prop:value=move || current.get() on:input=move |ev| current.set(event_target_value(&ev))/>
                    </Field>
                    <Field id="password-new" label="New password (12 to 256 characters)" error=field_error("new")>
                        <input id="password-new" type="password" maxlength="256" autocomplete="new-password"
                            aria-describedby="password-new-error"
                            prop:value=move || new.get() on:input=move |ev| new.set(event_target_value(&ev))/>
                    </Field>
                    <Field id="password-again" label="New password again" error=field_error("again")>
                        <input id="password-again" type="password" maxlength="256" autocomplete="new-password"
                            aria-describedby="password-again-error"
                            prop:value=move || again.get() on:input=move |ev| again.set(event_target_value(&ev))/>
                    </Field>
                    <button type="submit" id="password-submit">"Change password"</button>
                </fieldset>
                <p class="field-error" id="password-message" role="alert">{other_error}</p>
                <p class="notice" id="password-done" role="status" aria-live="polite">{move || done.get()}</p>
            </form>
        </section>
    }
    .into_any()
}

#[component]
fn SignOutEverywhere(csrf: StoredValue<String>) -> impl IntoView {
    let _ = csrf;
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let sign_out = move |_| {
        busy.set(true);
        error.set(None);
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            match crate::api::rest::send(
                "POST",
                "/api/v1/auth/logout_everywhere",
                &csrf.get_value(),
                &serde_json::Value::Null,
            )
            .await
            {
                Ok(_) => {
                    let _ = window().location().set_href(crate::components::layout::LOGIN_PATH);
                }
                Err(refusal) => {
                    error.set(Some(refusal.text));
                    busy.set(false);
                }
            }
        });
    };
    view! {
        <section class="card" aria-labelledby="everywhere-heading">
            <h2 id="everywhere-heading">"Sign out everywhere"</h2>
            <p>"Ends every session of yours, on every device, this one too."</p>
            <button type="button" id="sign-out-everywhere" class="danger" disabled=move || !hydrated.get() || busy.get()
                on:click=sign_out>"Sign out everywhere"</button>
            <p class="field-error" id="everywhere-message" role="alert">{move || error.get()}</p>
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::check_new_password;

    #[test]
    fn a_new_password_is_checked_as_the_server_checks_it_and_typed_twice() {
        let field = |r: Result<(), crate::api::rest::Refusal>| r.unwrap_err().field;
        assert_eq!(field(check_new_password("", "twelve chars", "twelve chars")).as_deref(), Some("current"));
        assert_eq!(field(check_new_password("old", "short", "short")).as_deref(), Some("new"));
        assert_eq!(field(check_new_password("old", "twelve chars", "twelve charz")).as_deref(), Some("again"));
        assert!(check_new_password("old", "twelve chars", "twelve chars").is_ok());
    }
}
