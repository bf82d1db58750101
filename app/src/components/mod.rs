//! Pieces shared by pages.

pub mod charts;
pub mod layout;
pub mod step_chart;
