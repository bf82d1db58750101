//! The pages' writes: JSON sent from the browser to the REST API (`/api/v1`) with the
//! session's CSRF token, the same routes API clients use, so every change is validated and
//! audited in one place. A refusal keeps what the server said: the field it names (shown
//! beside that field) and, for a version conflict, the current version.

use serde::{Deserialize, Serialize};

/// Why a write was not done, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The HTTP status (0 when the server did not answer).
    pub status: u16,
    /// The body field the server named (a 400, a 422, or a duplicate's 409); `None` for
    /// the request as a whole.
    pub field: Option<String>,
    /// A sentence a person can act on.
    pub text: String,
    /// A version conflict's current version (a 409 with `current_version`).
    pub current_version: Option<i64>,
}

impl Refusal {
    /// A refusal found before sending (client-side validation), about `field`.
    pub fn field(field: &str, text: impl Into<String>) -> Self {
        Self { status: 0, field: Some(field.to_owned()), text: text.into(), current_version: None }
    }

    /// A refusal about the request as a whole.
    pub fn general(text: impl Into<String>) -> Self {
        Self { status: 0, field: None, text: text.into(), current_version: None }
    }

    /// The sentence to show.
    pub fn message(&self) -> &str {
        &self.text
    }

    /// The current version, when the write was refused for being made against another.
    pub fn conflict_version(&self) -> Option<i64> {
        self.current_version
    }

    /// The sentence, when the refusal is about `field` (to show beside that field).
    pub fn about(&self, field: &str) -> Option<String> {
        (self.field.as_deref() == Some(field)).then(|| self.text.clone())
    }
}

/// The pages' one way of writing: sends `body` with `method` to `path` from the browser
/// ([`send`]), clears `busy` when the answer comes, then hands the reply to `done` or the
/// refusal to `refused`. On the server (a page being rendered) nothing is sent.
pub fn write(
    method: &'static str,
    path: String,
    csrf: String,
    body: serde_json::Value,
    busy: leptos::prelude::RwSignal<bool>,
    done: impl FnOnce(serde_json::Value) + 'static,
    refused: impl FnOnce(Refusal) + 'static,
) {
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        use leptos::prelude::Set;
        let answer = send(method, &path, &csrf, &body).await;
        busy.set(false);
        match answer {
            Ok(reply) => done(reply),
            Err(refusal) => refused(refusal),
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (method, path, csrf, body, busy, done, refused);
}

/// [`write`] for a change to what the whole page shows: once done the page is read again,
/// and `busy` stays set until it is replaced (a second press meanwhile would send the
/// change twice); a refusal clears `busy` and goes to `refused`.
pub fn write_then_reload(
    path: String,
    csrf: String,
    body: serde_json::Value,
    busy: leptos::prelude::RwSignal<bool>,
    refused: impl FnOnce(Refusal) + 'static,
) {
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        use leptos::prelude::Set;
        match send("POST", &path, &csrf, &body).await {
            Ok(_) => {
                let _ = leptos::prelude::window().location().reload();
            }
            Err(refusal) => {
                busy.set(false);
                refused(refusal);
            }
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (path, csrf, body, busy, refused);
}

/// Sends `body` with `method` (`POST` or `PUT`; `Value::Null`: no body) to `url`, with the
/// CSRF token; answers the reply's JSON (`null` when it has none) or the refusal.
#[cfg(feature = "hydrate")]
pub async fn send(method: &str, url: &str, csrf: &str, body: &serde_json::Value) -> Result<serde_json::Value, Refusal> {
    use gloo_net::http::Request;
    let builder = match method {
        "PUT" => Request::put(url),
        _ => Request::post(url),
    }
    .header("X-CSRF-Token", csrf);
    let unsent = |e: gloo_net::Error| Refusal::general(format!("could not send the change: {e}"));
    let request = if body.is_null() { builder.build().map_err(unsent)? } else { builder.json(body).map_err(unsent)? };
    let response = request.send().await.map_err(|e| Refusal::general(format!("the server did not answer: {e}")))?;
    let status = response.status();
    let reply: serde_json::Value = response.json().await.unwrap_or_default();
    if (200..300).contains(&status) {
        return Ok(reply);
    }
    let text = reply["error"].as_str().map(str::to_owned).unwrap_or_else(|| format!("the server answered {status}"));
    let current_version = if status == 409 { reply["current_version"].as_i64() } else { None };
    Err(Refusal { status, field: reply["field"].as_str().map(str::to_owned), text, current_version })
}

/// What a pm sees after a weights or limits change made against an old version of `pool`:
/// both versions and the changes in between from the audit trail (who, what, why), or the
/// weights it has now when the audit trail cannot be read.
#[cfg(feature = "hydrate")]
pub async fn pool_conflict(pool: &str, version: i64, now: i64) -> String {
    let between = usize::try_from(now - version).unwrap_or(1).clamp(1, 5);
    let changes = match super::list_audit(Some(format!("pool:{pool}")), None, None, None, None, None).await {
        Ok(view) if !view.entries.is_empty() => {
            let said: Vec<String> = view
                .entries
                .iter()
                .take(between)
                .map(|e| match &e.reason {
                    Some(why) => format!("{} by {} at {} ({why:?})", e.action, e.actor, e.at),
                    None => format!("{} by {} at {}", e.action, e.actor, e.at),
                })
                .collect();
            format!(" In between: {}.", said.join("; "))
        }
        _ => match super::get_pool(pool.to_owned()).await {
            Ok(Some(p)) => {
                let weights: Vec<String> = p.weights.iter().map(|w| format!("{} {}", w.member, w.weight)).collect();
                format!(" Its weights now: {}.", weights.join(", "))
            }
            _ => String::new(),
        },
    };
    format!(
        "Not saved: the pool changed meanwhile. You edited version {version}; it is now at version {now}.{changes} Reload to see the current pool, then try again."
    )
}
