//! Pieces shared by pages.

pub mod charts;
pub mod detail;
pub mod dialog;
pub mod form;
pub mod layout;
pub mod list;
pub mod number;
pub mod outcome_chart;
pub mod plot;
pub mod refresh;
pub mod time;
