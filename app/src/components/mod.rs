//! Pieces shared by pages.

pub mod charts;
pub mod form;
pub mod layout;
pub mod step_chart;
