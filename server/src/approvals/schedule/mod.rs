//! Scheduled change requests: when to apply an approved request, for the change_apply job.

pub mod store;
