//! Pieces the edit forms share: one labelled field with its help and its error under it,
//! and the reason every change needs for the audit trail. Forms with the `form-grid` class
//! lay their fields out in one responsive grid, the reason and the submit button last.

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

/// One field of a form, as every form lays it out: its label above its input (the
/// children, which carry the `id` the label names, and `aria-describedby` naming
/// `{id}-help` and `{id}-error` where those are given), help text under the input
/// (`{id}-help`: what to type, with an example), and the error about it under that
/// (`{id}-error`, empty while there is none). `wide` gives it a row of its own.
#[component]
pub fn Field(
    #[prop(into)] id: String,
    #[prop(into)] label: String,
    #[prop(into, optional)] help: Option<String>,
    #[prop(into, optional)] error: Option<Signal<Option<String>>>,
    #[prop(optional)] wide: bool,
    children: Children,
) -> impl IntoView {
    let error_id = format!("{id}-error");
    let help_id = format!("{id}-help");
    view! {
        <div class=if wide { "field wide" } else { "field" }>
            <label for=id>{label}</label>
            {children()}
            {help.map(|h| view! { <span class="field-help" id=help_id>{h}</span> })}
            {error.map(|e| view! { <span class="field-error" id=error_id>{move || e.get()}</span> })}
        </div>
    }
}

/// The ids an input names in `aria-describedby`: its help and its error.
pub fn described_by(id: &str) -> String {
    format!("{id}-help {id}-error")
}

/// The labelled reason field (1..=500 characters), bound to `reason`.
#[component]
pub fn ReasonField(id: &'static str, reason: RwSignal<String>) -> impl IntoView {
    view! {
        <Field id=id label="Reason (required, for the audit trail)" wide=true>
            <input id=id type="text" maxlength="500" required placeholder="e.g. the canary's declines are back to normal"
                prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
        </Field>
    }
}
