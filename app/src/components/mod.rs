//! Pieces shared by pages.

pub mod charts;
pub mod detail;
pub mod form;
pub mod layout;
pub mod list;
pub mod number;
pub mod outcome_chart;
pub mod refresh;
pub mod step_chart;
pub mod time;
