//! Pages that read their data again while they are open: a counter a page's resources
//! track, advanced every few seconds, only in the browser and only while the tab is
//! visible (a hidden tab asks for nothing).

use std::time::Duration;

use leptos::prelude::*;

/// How often pages read their data again while they are visible.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Advances `refreshes` every [`REFRESH_EVERY`] while the tab is visible and `when()` says
/// so (read untracked); stops when the page's owner is cleaned up. Nothing on the server.
pub fn every_while_visible(refreshes: RwSignal<u32>, when: impl Fn() -> bool + 'static) {
    #[cfg(feature = "hydrate")]
    {
        let ticking = set_interval_with_handle(
            move || {
                if !document().hidden() && when() {
                    refreshes.update(|n| *n += 1);
                }
            },
            REFRESH_EVERY,
        );
        if let Ok(handle) = ticking {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (refreshes, when);
}
