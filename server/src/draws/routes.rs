//! Traffic replay over HTTP: `POST /api/v1/pools/{pool}/replay`, what the recorded draws of
//! a period would have done under a candidate configuration (a read: nothing is written).

use actix_web::{post, web, HttpResponse};
use api::replay::{ReplayReport, DEFAULT_WINDOW};
use chrono::{DateTime, Utc};
use client::pool::PoolName;
use engine::Weights;
use serde::Deserialize;
use serde_json::Value;

use super::replay::{Bounds, Candidate, ReplayRequest};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(replay_pool);
}

/// A replay: the period, and what its demand runs through.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// The period's start (RFC 3339): draw-log minutes from this one on.
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T10:00:00Z")]
    from: String,
    /// The period's end (RFC 3339), after `from`: minutes before this one.
    #[schema(value_type = String, format = DateTime, example = "2026-12-03T11:00:00Z")]
    to: String,
    /// The pool as published now, with these weights instead (a channels pool's channels,
    /// or a tiers pool's tiers `G`, `N`, `U`): a weights change before it is saved. Not with
    /// `candidate`.
    #[schema(value_type = Option<Vec<crate::schema::WeightEntry>>, min_items = 1)]
    #[serde(default)]
    weights: Option<Weights>,
    /// A whole pool body, as `PUT /api/v1/pools/{pool}` takes it (`snapshot`). Not with
    /// `weights`. Neither: the pool as published now.
    #[schema(value_type = Option<crate::schema::PoolSnapshotBody>)]
    #[serde(default)]
    candidate: Option<Value>,
    /// Seeds the replay's orderings: the same seed, configuration and period replay the same
    /// (default 1).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9007199254740991_u64)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    seed: Option<u64>,
    /// Tickets in a window of the window deviation, 1..=100000 (default 100).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100000)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    window: Option<u64>,
}

fn time(field: &str, raw: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| ApiError::bad_request(field, format!("{raw:?} is not an RFC 3339 time ({e})")))
}

impl ReplayBody {
    fn request(self, pool: PoolName) -> Result<ReplayRequest, ApiError> {
        let (from, to) = (time("from", &self.from)?, time("to", &self.to)?);
        let candidate = match (self.weights, self.candidate) {
            (Some(_), Some(_)) => {
                return Err(ApiError::Unprocessable {
                    field: "candidate".into(),
                    rule: "give weights or a candidate, not both".into(),
                })
            }
            (Some(weights), None) => Candidate::Weights(weights),
            (None, Some(body)) => Candidate::Body(Box::new(crate::pools::parse_pool_body(&body).map_err(|e| {
                // The candidate's own fields, named inside it.
                match ApiError::from(e) {
                    ApiError::BadRequest { field, rule } => ApiError::bad_request(format!("candidate.{field}"), rule),
                    ApiError::Unprocessable { field, rule } => {
                        ApiError::Unprocessable { field: format!("candidate.{field}"), rule }
                    }
                    other => other,
                }
            })?)),
            (None, None) => Candidate::Published,
        };
        let window = self
            .window
            .map_or(Ok(DEFAULT_WINDOW), usize::try_from)
            .map_err(|_| ApiError::Unprocessable { field: "window".into(), rule: "too large".into() })?;
        let seed = self.seed.unwrap_or(1);
        if seed > api::MAX_INTEGER {
            return Err(ApiError::bad_request("seed", "must be 0..=2^53-1"));
        }
        Ok(ReplayRequest { pool, from, to, candidate, seed, window, bounds: Some(Bounds::HTTP) })
    }
}

/// `POST /api/v1/pools/{pool}/replay` with `{"from", "to", "weights"? | "candidate"?,
/// "seed"?, "window"?}`: the draws the pool served in the period (its draw log) run
/// through the pool as published now, with `weights` instead of its own, or through a
/// whole `candidate` body; per member the expected, recorded and replayed shares, the cap
/// hits and the recorded success rate; for both sequences the expected success rate, the
/// largest window deviation and the longest run. Writes nothing.
#[utoipa::path(
    tag = "pool",
    operation_id = "replay_pool",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "The replay's report", body = ReplayReport),
        (status = 400, description = "A malformed pool name or body: `from` or `to` not an RFC 3339 time, weights not unique, negative or all zero, a `seed` above 2^53-1, a candidate missing a field (naming `candidate.<field>`)", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 503, description = "Another replay has been computing on this server for 10 s (one at a time), or Postgres unavailable", body = ErrorBody),
        (status = 422, description = "`to` not after `from`, a period holding more than 2,000,000 recorded draws, or a replay taking more than 500,000,000 steps (`to`); no recorded draws in the period (`from`); `weights` breaking the pool's rules (`weights`); a candidate field of the wrong type or breaking a pool's rules (`candidate.<field>`); both `weights` and `candidate` (`candidate`); `window` out of 1..=100000", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/replay")]
pub async fn replay_pool(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReplayBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let request = body.into_inner().request(pool)?;
    Ok(HttpResponse::Ok().json(super::replay::replay(&state.db, &request).await?))
}
