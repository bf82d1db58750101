//! Users and API tokens, for admins: the users (searched, sorted and paged on the server,
//! the query in the URL) with their role and state, every token with its scope, owner and
//! use; admins add users and tokens, change a role, disable, unlock and reset a password
//! in one dialog per user, and revoke tokens here. A generated password or a new token's secret is shown once,
//! right after it was made. Everyone else sees a notice and no data.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::access::USER_SORTS;
use crate::api::rest::Refusal;
use crate::api::{list_access, AccessView, UserView};
use crate::components::dialog::{return_focus_on_close, trap_tab};
use crate::components::form::Field;
use crate::components::layout::CurrentSession;
use crate::components::list::{neighbours, query_of, summary, Paging, SearchForm};
use crate::components::time::When;

mod tokens;
use tokens::{NewTokenForm, TokenTable};

/// The users and tokens, read again after each change.
type AccessResource = Resource<Result<AccessView, ServerFnError>>;

/// The roles a user can have, in the order the forms offer them.
const ROLES: [&str; 5] = ["viewer", "operator", "pm", "auditor", "admin"];

/// A secret shown once: only the browser that asked for it ever sees it.
#[derive(Debug, Clone)]
struct Revealed {
    /// What it is, e.g. "the password of ops-alice".
    what: String,
    secret: String,
}

/// What every form on the page shares (read by the browser's writes only).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Page {
    csrf: StoredValue<String>,
    access: AccessResource,
    /// What was done last (outside the lists, so that it survives their refetch).
    done: RwSignal<Option<String>>,
    revealed: RwSignal<Option<Revealed>>,
    /// The user whose change dialog is open.
    editing: RwSignal<Option<UserView>>,
}

/// Users (searched, sorted and paged on the server, the query in the URL) and API tokens
/// (admins only).
#[component]
pub fn Users() -> impl IntoView {
    let session = expect_context::<CurrentSession>().0;
    let params = use_query_map();
    let query = move || params.with(query_of);
    let access: AccessResource = Resource::new(query, |q| list_access(q.q, q.sort, q.page));
    let done = RwSignal::new(None::<String>);
    let revealed = RwSignal::new(None::<Revealed>);
    let editing = RwSignal::new(None::<UserView>);
    view! {
        <h1>"Users and API tokens"</h1>
        <p id="users-message" class="notice" role="status" aria-live="polite">{move || done.get()}</p>
        {move || revealed.get().map(|r| view! {
            <section class="card once" id="revealed" aria-labelledby="revealed-heading">
                <h2 id="revealed-heading">"Copy " {r.what.clone()} " now"</h2>
                <p><code id="revealed-secret" class="secret">{r.secret}</code></p>
                <p id="revealed-warning"><strong>"It will not be shown again:"</strong> " only its hash is kept. Store it somewhere safe before you leave this page."</p>
                <button type="button" id="revealed-dismiss" class="plain" on:click=move |_| revealed.set(None)>"I have stored it"</button>
            </section>
        })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let session = session.await.ok().flatten();
                match session {
                    Some(s) if s.may_manage_access => {
                        let page = Page { csrf: StoredValue::new(s.csrf_token), access, done, revealed, editing };
                        let q = query();
                        let form = view! {
                            <SearchForm path="/users" id="user" label="Name or role contains" aria_label="Search users"
                                q=q.q.clone().unwrap_or_default() sort=q.sort.clone().unwrap_or_else(|| "name".into()) sorts=&USER_SORTS/>
                        };
                        let dialog = move || editing.get().map(|user| view! { <UserDialog user page/> });
                        match access.await {
                            Ok(list) => view! { {form} <AccessAdmin list page/> {dialog} }.into_any(),
                            Err(e) => view! { {form} <p class="error" role="alert">"Could not load the users and tokens: " {e.to_string()}</p> }.into_any(),
                        }
                    }
                    Some(s) => view! {
                        <p class="notice" id="users-restricted">
                            "Only admins see and manage users and API tokens; you are signed in as " {s.role} "."
                        </p>
                    }.into_any(),
                    None => ().into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

#[component]
fn AccessAdmin(list: AccessView, page: Page) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="users-heading">
            <h2 id="users-heading">"Users"</h2>
            <UserTable users=list.users page/>
            <NewUserForm page/>
        </section>
        <section class="card" aria-labelledby="tokens-heading">
            <h2 id="tokens-heading">"API tokens"</h2>
            <TokenTable tokens=list.tokens page/>
            <NewTokenForm page/>
        </section>
    }
    .into_any()
}

/// A user's state: a badge that says it in words, and since or until when.
fn user_state(u: &UserView) -> AnyView {
    match (&u.disabled_at, &u.locked_until, u.can_sign_in) {
        (Some(at), _, _) => view! { <span class="badge bad">"disabled"</span> " " <When at=at.clone()/> }.into_any(),
        (None, Some(until), _) => {
            view! { <span class="badge warn">"locked"</span> " (unlocks " <When at=until.clone()/> ")" }.into_any()
        }
        (None, None, false) => {
            view! { <span class="badge warn">"no password"</span> " (the configured admin token's actor)" }.into_any()
        }
        (None, None, true) => view! { <span class="badge ok">"active"</span> }.into_any(),
    }
}

#[component]
fn UserTable(users: crate::api::lists::ListPage<UserView>, page: Page) -> impl IntoView {
    if users.total == 0 {
        return view! { <p id="users-none">{format!("No user's name or role contains \"{}\".", users.q)}</p> }
            .into_any();
    }
    let summary = summary(users.total, "user", &users.q, users.page, users.pages);
    let (previous, next) = neighbours(users.page, users.pages, |n| users.href("/users", "name", n));
    view! {
        <p id="users-summary" role="status">{summary}</p>
        <div class="table-wrap">
        <table class="grid" id="users">
            <thead>
                <tr>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Role"</th>
                    <th scope="col">"State"</th>
                    <th scope="col">"Created"</th>
                    <th scope="col">"Change"</th>
                </tr>
            </thead>
            <tbody>
                {users.rows.into_iter().map(|u| {
                    let name = u.name.clone();
                    let state = user_state(&u);
                    let user = u.clone();
                    view! {
                        <tr data-user=name.clone()>
                            <th scope="row"><code>{u.name.clone()}</code></th>
                            <td id=format!("user-role-{name}")>{u.role.clone()}</td>
                            <td id=format!("user-state-{name}")>{state}</td>
                            <td><When at=u.created_at.clone()/></td>
                            <td><button type="button" id=format!("change-user-{name}") aria-haspopup="dialog"
                                aria-label=format!("Change {name}") on:click=move |_| page.editing.set(Some(user.clone()))>"Change…"</button></td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        </div>
        <Paging id="users" previous next/>
        <p class="notice">"Sign-in times are not recorded; an account is locked for 15 minutes after 5 failed sign-ins in a row."</p>
    }
    .into_any()
}

/// The change dialog of one user: a role change, disabling and unlocking. These routes take
/// no reason; the audit trail names the admin who made the change. Escape or Close shuts it.
#[component]
fn UserDialog(user: UserView, page: Page) -> impl IntoView {
    let role = RwSignal::new(user.role.clone());
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    // The role is where the dialog starts (keyboard users change it at once).
    let role_select = NodeRef::<leptos::html::Select>::new();
    Effect::new(move |_| {
        if let Some(select) = role_select.get() {
            // After the frame that attaches the dialog: an element not yet in the page
            // takes no focus.
            request_animation_frame(move || {
                let _ = select.focus();
            });
        }
    });
    let name = StoredValue::new(user.name.clone());
    let id = |what: &str| format!("{what}-{}", user.name);
    let act = move |method: &'static str, tail: &'static str, body: serde_json::Value, said: String| {
        busy.set(true);
        error.set(None);
        let path = format!("/api/v1/users/{}/{tail}", name.get_value());
        run(page, method, path, body, said, error, busy, |_| None);
    };
    let set_role = move |_| {
        let chosen = role.get_untracked();
        let said = format!("{} is now {chosen}.", name.get_value());
        act("PUT", "role", serde_json::json!({ "role": chosen }), said);
    };
    let disable = move |_| {
        let said = format!("{} disabled and signed out everywhere.", name.get_value());
        act("POST", "disable", serde_json::Value::Null, said)
    };
    let unlock = move |_| act("POST", "unlock", serde_json::Value::Null, format!("{} unlocked.", name.get_value()));
    // A password generated by the server, shown once; every session of the user ends.
    let reset = move |_| {
        busy.set(true);
        error.set(None);
        let user = name.get_value();
        let path = format!("/api/v1/users/{user}/password");
        let said = format!("The password of {user} was reset; every session of theirs ended.");
        run(page, "POST", path, serde_json::Value::Null, said, error, busy, move |reply| {
            reply["password"]
                .as_str()
                .map(|secret| Revealed { what: format!("the new password of {user}"), secret: secret.to_owned() })
        });
    };
    let current = user.role.clone();
    let (heading, labelled_by) = (id("user-dialog-heading"), id("user-dialog-heading"));
    let role_id = id("role");
    let close = move || page.editing.set(None);
    return_focus_on_close(format!("change-user-{}", user.name));
    view! {
        <div class="dialog-backdrop">
            <section class="dialog card" role="dialog" aria-modal="true" aria-labelledby=labelled_by id="user-dialog"
                on:keydown=move |ev: leptos::ev::KeyboardEvent| {
                    if ev.key() == "Escape" {
                        close()
                    } else {
                        trap_tab(&ev, "user-dialog")
                    }
                }>
                <h2 id=heading>"Change " <code>{user.name.clone()}</code></h2>
                <p>"Now " {user.role.clone()} "; " {user_state(&user)}</p>
                <form class="row-actions" id=id("user-actions") on:submit=|ev: leptos::ev::SubmitEvent| ev.prevent_default()>
                    <fieldset disabled=move || !hydrated.get() || busy.get()>
                        <legend class="visually-hidden">"Change " {user.name.clone()}</legend>
                        <Field id=role_id.clone() label="Role" error=Signal::derive(move || error.get().and_then(|r| r.about("role")))>
                            <select id=role_id.clone() node_ref=role_select aria-describedby=format!("{role_id}-error")
                                prop:value=move || role.get() on:change=move |ev| role.set(event_target_value(&ev))>
                                {ROLES.into_iter().map(|r| {
                                    let chosen = r == current;
                                    view! { <option value=r selected=chosen>{r}</option> }
                                }).collect_view()}
                            </select>
                        </Field>
                        <div class="buttons">
                            <button type="button" id=id("set-role") on:click=set_role>"Set role"</button>
                            {user.disabled_at.is_none().then(|| view! { <button type="button" class="danger" id=id("disable") on:click=disable>"Disable"</button> })}
                            {user.locked_until.is_some().then(|| view! { <button type="button" id=id("unlock") on:click=unlock>"Unlock"</button> })}
                            {user.can_sign_in.then(|| view! { <button type="button" id=id("reset-password") on:click=reset>"Reset password"</button> })}
                        </div>
                    </fieldset>
                    <p class="field-error" id=id("user-message") role="alert">
                        {move || error.get().filter(|r| r.field.as_deref() != Some("role")).map(|r| r.text)}
                    </p>
                </form>
                <button type="button" id="dialog-close" on:click=move |_| close()>"Close"</button>
            </section>
        </div>
    }
    .into_any()
}

/// A new user: name, role and, optionally, a password (one is generated and shown once
/// otherwise).
#[component]
fn NewUserForm(page: Page) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let role = RwSignal::new("viewer".to_owned());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<Refusal>);
    let busy = RwSignal::new(false);
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let (n, r, p) = (name.get_untracked().trim().to_owned(), role.get_untracked(), password.get_untracked());
        if let Err(refusal) = check_user_name(&n).and_then(|()| check_password(&p)) {
            error.set(Some(refusal));
            return;
        }
        let mut body = serde_json::json!({ "name": n, "role": r });
        if !p.is_empty() {
            body["password"] = serde_json::json!(p);
        }
        busy.set(true);
        error.set(None);
        let said = format!("User {n} created with role {r}.");
        run(page, "POST", "/api/v1/users".to_owned(), body, said, error, busy, move |reply| {
            reply["password"]
                .as_str()
                .map(|secret| Revealed { what: format!("the password of {n}"), secret: secret.to_owned() })
        });
    };
    let field_error = move |field: &'static str| Signal::derive(move || error.get().and_then(|r| r.about(field)));
    let other_error = move || {
        error.get().filter(|r| !matches!(r.field.as_deref(), Some("name" | "role" | "password"))).map(|r| r.text)
    };
    view! {
        <form id="new-user-form" class="inline-form form-grid" on:submit=submit>
            <fieldset disabled=move || !hydrated.get() || busy.get()>
                <legend>"Add a user"</legend>
                <Field id="new-user-name" label="Name" error=field_error("name")>
                    <input id="new-user-name" type="text" maxlength="64" autocomplete="off" aria-describedby="new-user-name-error"
                        prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </Field>
                <Field id="new-user-role" label="Role" error=field_error("role")>
                    <select id="new-user-role" aria-describedby="new-user-role-error" prop:value=move || role.get() on:change=move |ev| role.set(event_target_value(&ev))>
                        {ROLES.into_iter().map(|r| {
                            let chosen = r == "viewer";
                            view! { <option value=r selected=chosen>{r}</option> }
                        }).collect_view()}
                    </select>
                </Field>
                <Field id="new-user-password" label="Password (empty: generate one)" error=field_error("password")>
                    <input id="new-user-password" type="password" maxlength="256" autocomplete="new-password" aria-describedby="new-user-password-error"
                        prop:value=move || password.get() on:input=move |ev| password.set(event_target_value(&ev))/>
                </Field>
                <button type="submit" id="new-user-submit">"Add user"</button>
            </fieldset>
            <p class="field-error" id="new-user-message" role="alert">{other_error}</p>
        </form>
    }
    .into_any()
}

/// The server's rules for a user name, checked before sending.
fn check_user_name(name: &str) -> Result<(), Refusal> {
    api::UserName::parse(name)
        .map(drop)
        .map_err(|_| Refusal::field("name", "must be 1 to 64 of ASCII letters, digits, '_', '.', '@', '-'"))
}

/// A password given is 12..=256 characters; none means one is generated.
fn check_password(password: &str) -> Result<(), Refusal> {
    let n = password.chars().count();
    if n != 0 && !(12..=256).contains(&n) {
        return Err(Refusal::field(
            "password",
            format!("must be 12 to 256 characters (or empty, to generate one); got {n}"),
        ));
    }
    Ok(())
}

/// Sends one change; once done, says `said`, shows what `reveal` finds in the reply (a new
/// secret) and reads the lists again; otherwise leaves the refusal in `error`.
#[allow(clippy::too_many_arguments)]
fn run(
    page: Page,
    method: &'static str,
    path: String,
    body: serde_json::Value,
    said: String,
    error: RwSignal<Option<Refusal>>,
    busy: RwSignal<bool>,
    reveal: impl FnOnce(&serde_json::Value) -> Option<Revealed> + 'static,
) {
    crate::api::rest::write(
        method,
        path,
        page.csrf.get_value(),
        body,
        busy,
        move |reply| {
            if let Some(r) = reveal(&reply) {
                page.revealed.set(Some(r));
            }
            page.done.set(Some(said));
            page.editing.set(None);
            page.access.refetch();
        },
        move |refusal| error.set(Some(refusal)),
    );
}

#[cfg(test)]
mod tests {
    use super::{check_password, check_user_name};

    #[test]
    fn names_and_passwords_are_checked_as_the_server_checks_them() {
        assert!(check_user_name("ops-alice@x.y").is_ok());
        assert_eq!(check_user_name("bad name").unwrap_err().field.as_deref(), Some("name"));
        assert!(check_user_name("").is_err());
        assert!(check_password("").is_ok(), "empty: generated");
        assert_eq!(check_password("short").unwrap_err().field.as_deref(), Some("password"));
        assert!(check_password("twelve chars").is_ok());
    }
}
