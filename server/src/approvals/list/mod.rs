//! Change requests as lists show them.

pub mod store;
