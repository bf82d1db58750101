//! The pool data plane over HTTP: draw a ticket.

use actix_web::{post, web, HttpResponse};
use client::pool::{Draw, PoolName};
use serde::Deserialize;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// An optional draw body: a caller key for sticky draws.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrawBody {
    /// Draws by weighted consistent hashing of this key (e.g. a user id): the same key
    /// keeps its member while the weights stay. 1..=256 bytes.
    #[schema(min_length = 1, max_length = 256)]
    sticky_key: Option<String>,
}

/// Draws the next ticket of a pool: the member (channel) this request should use.
///
/// `{"member","pool","version","source"}`; 404 for an unknown pool, 400 for a malformed
/// name or body, 503 when nothing can be drawn.
#[utoipa::path(
    tag = "pool",
    params(("pool" = PoolName, Path, description = "The pool (routing scope) to draw from")),
    request_body(
        content = Option<DrawBody>,
        description = "Optional: no body (or `null`) is an ordinary draw; `sticky_key` draws by weighted consistent hashing",
    ),
    responses(
        (status = 200, description = "The drawn member and where it came from", body = Draw),
        (status = 400, description = "A malformed pool name or body, naming the field and the rule", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 503, description = "Nothing can be drawn (exhausted, every member ejected or capped, Redis unreachable without a fallback)", body = ErrorBody),
    )
)]
#[post("/api/v1/pools/{pool}/draw")]
pub async fn draw_ticket(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    crate::access::principal(&req)?.serves(crate::access::bindings::Resource::Pool, pool.as_str())?;
    // No body (or JSON null): an ordinary draw. A body that is not a valid `DrawBody` is a 400, never
    // silently an ordinary draw.
    let body: DrawBody = crate::http::optional_body(&body)?;
    let drawn = match &body.sticky_key {
        Some(key) if key.is_empty() || key.len() > 256 => {
            return Err(ApiError::bad_request("sticky_key", "must be 1..=256 bytes"))
        }
        Some(key) => state.pools.draw_sticky(&pool, key.as_bytes()).await,
        None => state.pools.draw(&pool).await,
    };
    Ok(HttpResponse::Ok().json(drawn?))
}
