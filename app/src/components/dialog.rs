//! What every modal dialog does for keyboard users: Tab and Shift+Tab stay inside it (from
//! its last focusable element to its first and back), and when it closes, however it
//! closes, the focus returns to the button that opened it.

use leptos::prelude::*;

/// What may take the focus inside a dialog.
#[cfg(feature = "hydrate")]
const FOCUSABLE: &str = "button:not([disabled]), input:not([disabled]), select:not([disabled]), \
                         textarea:not([disabled]), a[href], [tabindex]:not([tabindex='-1'])";

/// Keeps a Tab (or Shift+Tab) pressed in the dialog `dialog_id` inside it; call it from the
/// dialog's `keydown` handler.
pub fn trap_tab(ev: &leptos::ev::KeyboardEvent, dialog_id: &str) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if ev.key() != "Tab" {
            return;
        }
        let Some(document) = leptos::prelude::window().document() else { return };
        let Some(dialog) = document.get_element_by_id(dialog_id) else { return };
        let Ok(list) = dialog.query_selector_all(FOCUSABLE) else { return };
        let (Some(first), Some(last)) = (list.item(0), list.item(list.length().saturating_sub(1))) else { return };
        let active = document.active_element();
        let inside = active.as_ref().is_some_and(|a| dialog.contains(Some(a)));
        let (edge, wrap_to) = if ev.shift_key() { (&first, &last) } else { (&last, &first) };
        let at_edge = active.as_ref().is_some_and(|a| edge.is_same_node(Some(a)));
        if at_edge || !inside {
            ev.prevent_default();
            if let Ok(target) = wrap_to.clone().dyn_into::<web_sys::HtmlElement>() {
                let _ = target.focus();
            }
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (ev, dialog_id);
}

/// When the dialog being built is removed, puts the focus back on the element `opener_id`
/// (the button that opened it), if it is still on the page.
pub fn return_focus_on_close(opener_id: String) {
    on_cleanup(move || {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            let opener = leptos::prelude::window()
                .document()
                .and_then(|d| d.get_element_by_id(&opener_id))
                .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok());
            if let Some(opener) = opener {
                let _ = opener.focus();
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &opener_id;
    });
}
