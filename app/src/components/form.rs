//! Pieces the edit forms share: one labelled field with its error beside it, and the
//! reason every change needs for the audit trail.

use leptos::prelude::*;

/// The sentence a form shows when a change comes without a reason.
pub const REASON_REQUIRED: &str = "A reason is required: it goes into the audit trail.";

/// The reason as typed, trimmed; `Err` with [`REASON_REQUIRED`] when there is none.
pub fn required_reason(reason: RwSignal<String>) -> Result<String, String> {
    let why = reason.get_untracked().trim().to_owned();
    if why.is_empty() {
        Err(REASON_REQUIRED.to_owned())
    } else {
        Ok(why)
    }
}

/// One field of a form: its label, its input (the children, which carry the `id` the
/// label names and, with an `error`, `aria-describedby="{id}-error"`), and the error about
/// it beside it (`{id}-error`, empty while there is none). `wide` gives it a row of its own.
#[component]
pub fn Field(
    #[prop(into)] id: String,
    #[prop(into)] label: String,
    #[prop(into, optional)] error: Option<Signal<Option<String>>>,
    #[prop(optional)] wide: bool,
    children: Children,
) -> impl IntoView {
    let error_id = format!("{id}-error");
    view! {
        <div class=if wide { "field wide" } else { "field" }>
            <label for=id>{label}</label>
            {children()}
            {error.map(|e| view! { <span class="field-error" id=error_id>{move || e.get()}</span> })}
        </div>
    }
}

/// The labelled reason field (1..=500 characters), bound to `reason`.
#[component]
pub fn ReasonField(id: &'static str, reason: RwSignal<String>) -> impl IntoView {
    view! {
        <Field id=id label="Reason (required, for the audit trail)" wide=true>
            <input id=id type="text" maxlength="500" required
                prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
        </Field>
    }
}
