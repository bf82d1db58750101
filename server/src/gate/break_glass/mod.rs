//! Break-glass: risk-reducing operations on a pool under an approval policy stay immediate
//! and are flagged for an auditor to acknowledge.

pub mod routes;
pub mod store;
