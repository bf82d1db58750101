//! The pool data plane over HTTP: draw a ticket.

use actix_web::{post, web, HttpResponse};
use client::pool::{PoolError, PoolName};
use serde::Deserialize;

use crate::error::ApiError;
use crate::state::AppState;

/// An optional draw body: a caller key for sticky draws.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrawBody {
    /// Draws by weighted consistent hashing of this key (e.g. a user id): the same key
    /// keeps its member while the weights stay.
    sticky_key: Option<String>,
}

/// `POST /api/v1/pools/{pool}/draw` → `{"member","pool","version","source"}`; 404 for an
/// unknown pool, 400 for a malformed name, 503 when nothing can be drawn.
#[post("/api/v1/pools/{pool}/draw")]
pub async fn draw_ticket(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    // No body (or JSON null): an ordinary draw. A body that is not a valid `DrawBody` is a 400, never
    // silently an ordinary draw.
    let body: DrawBody = if body.iter().all(u8::is_ascii_whitespace) || body.trim_ascii() == b"null" {
        DrawBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request("body", e.to_string()))?
    };
    let drawn = match &body.sticky_key {
        Some(key) if key.is_empty() || key.len() > 256 => {
            return Err(ApiError::bad_request("sticky_key", "must be 1..=256 bytes"))
        }
        Some(key) => state.pools.draw_sticky(&pool, key.as_bytes()).await,
        None => state.pools.draw(&pool).await,
    };
    match drawn {
        Ok(draw) => Ok(HttpResponse::Ok().json(draw)),
        Err(PoolError::UnknownPool(p)) => Err(ApiError::NotFound(format!("unknown pool {:?}", p.as_str()))),
        Err(e @ (PoolError::Exhausted { .. } | PoolError::Unavailable { .. } | PoolError::NothingDrawable(_))) => {
            Err(ApiError::Unavailable(e.to_string()))
        }
        Err(PoolError::Invalid(e)) => Err(e.into()),
        Err(e) => Err(ApiError::Unexpected(anyhow::Error::new(e))),
    }
}
