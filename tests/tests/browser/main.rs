//! The admin UI in headless Chromium against real Postgres and Redis: one test binary
//! (linking is the slow part), one module per page or flow, so a failure is named
//! `<area>::<test>`.

mod browser;
mod ui_auth;
mod ui_changes;
mod ui_channels;
mod ui_dashboard;
mod ui_grants;
mod ui_pages;
mod ui_pool_edit;
mod ui_ramps;
mod ui_replay;
mod ui_tenants;
mod ui_tiers;
mod ui_users;
