//! Pieces the edit forms share: the reason every change needs for the audit trail.

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

/// The labelled reason field (1..=500 characters), bound to `reason`.
#[component]
pub fn ReasonField(id: &'static str, reason: RwSignal<String>) -> impl IntoView {
    view! {
        <div class="field wide">
            <label for=id>"Reason (required, for the audit trail)"</label>
            <input id=id type="text" maxlength="500" required
                prop:value=move || reason.get() on:input=move |ev| reason.set(event_target_value(&ev))/>
        </div>
    }
}
