//! Pieces shared by pages.

pub mod layout;
