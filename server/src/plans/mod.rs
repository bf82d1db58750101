//! Plans: the limits tenants are on. [`routes`] is the admin API, [`store`] its SQL.

pub mod routes;
pub mod store;

use client::quota::TokenCount;
use serde::Deserialize;

use crate::inputs::*;

pub use crate::inputs::PlanName;

/// A plan's limits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "PlanSpecRaw")]
pub struct PlanSpec {
    /// Tokens per UTC calendar month, 0..=2^53−1.
    pub monthly_tokens: TokenCount,
    /// Requests per UTC day, 0..=2^53−1.
    pub daily_requests: TokenCount,
    /// Reservations open at once, 0..=2^31−1.
    pub concurrency: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlanSpecRaw {
    monthly_tokens: serde_json::Number,
    daily_requests: serde_json::Number,
    concurrency: serde_json::Number,
}

/// An integer from JSON, or the field's rule.
pub(crate) fn integer(field: &str, n: &serde_json::Number, max: u64) -> Result<u64, String> {
    match crate::inputs::exact_integer(n) {
        Some(v) if (0..=max as i128).contains(&v) => Ok(v as u64),
        _ => Err(format!("{field}: must be an integer in 0..={max}, got {n}")),
    }
}

impl TryFrom<PlanSpecRaw> for PlanSpec {
    type Error = String;
    fn try_from(raw: PlanSpecRaw) -> Result<Self, String> {
        let count = |field: &str, n: &serde_json::Number| -> Result<TokenCount, String> {
            let v = integer(field, n, MAX_INTEGER)?;
            TokenCount::parse(field, v as i128).map_err(|e| format!("{}: {}", e.field, e.rule))
        };
        Ok(Self {
            monthly_tokens: count("monthly_tokens", &raw.monthly_tokens)?,
            daily_requests: count("daily_requests", &raw.daily_requests)?,
            concurrency: integer("concurrency", &raw.concurrency, i32::MAX as u64)? as u32,
        })
    }
}

/// A plan as stored, with how many tenants are on it: defined in `api`, it is what the
/// plan routes answer.
pub use api::plans::Plan;
