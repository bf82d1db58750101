//! The admin API for channels. Reads need permission `read`, writes `edit` or `operate`
//! (see `crate::access::requirement`). Writes are audited and publish the pools holding the
//! channel at once, or through the outbox when Redis is away.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::channels::{ChannelList, ChannelSwitched, ChannelWritten};
use api::WriteReply;
use client::pool::{PoolName, ReweightMode};
use engine::Tier;
use serde::Deserialize;

use super::{store, ChannelCode, ChannelSpec};
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::http::{actor, expected, malformed};
use crate::inputs::{DisplayName, Weight};
use crate::publish::{publish_now, rebuild_published_if_needed};
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_channels)
        .service(create_channel)
        .service(get_channel)
        .service(update_channel)
        .service(disable_channel)
        .service(enable_channel);
}

/// `GET /api/v1/channels` → every channel with the pools that hold it.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every channel, by code: each with the pools that hold it", body = ChannelList),
    ),
)]
#[get("/api/v1/channels")]
pub async fn list_channels(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let channels = store::list_channels(&state.db).await?;
    Ok(HttpResponse::Ok().json(ChannelList { channels }))
}

/// `GET /api/v1/channels/{code}` → the channel, or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "The channel, with the pools that hold it", body = super::Channel),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 400, description = "A malformed channel code (naming `code`)", body = ErrorBody),
    ),
)]
#[get("/api/v1/channels/{code}")]
pub async fn get_channel(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    match store::get_channel(&state.db, &code).await? {
        Some(channel) => Ok(HttpResponse::Ok().json(channel)),
        None => Err(ApiError::NotFound(format!("unknown channel {:?}", code.as_str()))),
    }
}

/// A channel to register.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewChannelBody {
    /// The code tickets carry: 1..=64 of `[A-Za-z0-9_.-]`.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    code: ChannelCode,
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    #[schema(
        value_type = String,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    name: DisplayName,
    /// The tier it serves in `tiers` pools, if any.
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::Tier>)]
    tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one, 0..=2^53−1.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    base_weight: Weight,
    /// Whether pools draw it (default true).
    #[serde(default = "yes")]
    #[schema(default = true)]
    enabled: bool,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(value_type = Option<crate::schema::Reason>)]
    reason: Option<String>,
}

fn yes() -> bool {
    true
}

/// `POST /api/v1/channels` with `{"code", "name", "tier"?, "base_weight", "enabled"?,
/// "reason"?}` → 201 and the channel; 409 when the code is taken.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Registered", body = ChannelWritten),
        (status = 400, description = "A malformed body, naming the field (code, name, tier, base_weight in 0..=2^53−1, reason)", body = ErrorBody),
        (status = 409, description = "The code is taken: an `ErrorBody` naming `code`", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels")]
pub async fn create_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<NewChannelBody>,
) -> Result<HttpResponse, ApiError> {
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let spec = ChannelSpec { name: body.name, tier: body.tier, base_weight: body.base_weight };
    let (written, channel) = store::create_channel(&state.db, &who.ctx(), &body.code, &spec, body.enabled).await?;
    Ok(HttpResponse::Created().json(ChannelWritten { channel, audit_id: written.audit_id, version: written.version }))
}

/// A channel's new name, tier and base weight.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    /// A human-readable name: 1..=200 characters, not blank, no control characters.
    #[schema(
        value_type = String,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    name: DisplayName,
    /// The tier it serves in `tiers` pools; left out: none.
    #[serde(default)]
    #[schema(value_type = Option<crate::schema::Tier>)]
    tier: Option<Tier>,
    /// The weight it gets when it joins a pool without one, 0..=2^53−1.
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    base_weight: Weight,
    /// The channel's version this change was made against.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(value_type = Option<crate::schema::Reason>)]
    reason: Option<String>,
}

/// `PUT /api/v1/channels/{code}` with `{"name", "tier"?, "base_weight",
/// "expected_version", "reason"?}`.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "Changed", body = ChannelWritten),
        (status = 400, description = "A malformed channel code in the path or a malformed body, naming the field, or a negative `expected_version`", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version` (a `ConflictBody`), or the `channels` approval policy applies (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "A tier the channel does not serve in a tiers pool that holds it", body = ErrorBody),
    ),
)]
#[put("/api/v1/channels/{code}")]
pub async fn update_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ChannelBody>,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(&path).map_err(malformed)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let spec = ChannelSpec { name: body.name, tier: body.tier, base_weight: body.base_weight };
    let (written, channel) =
        store::update_channel(&state.db, &who.ctx(), &code, &spec, expected(body.expected_version)?).await?;
    Ok(HttpResponse::Ok().json(ChannelWritten { channel, audit_id: written.audit_id, version: written.version }))
}

/// An enable or disable.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The channel's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    expected_version: Option<i64>,
}

async fn switch_channel(
    req: HttpRequest,
    state: &AppState,
    code: &str,
    body: SwitchBody,
    enabled: bool,
) -> Result<HttpResponse, ApiError> {
    let code = ChannelCode::parse(code).map_err(malformed)?;
    let who = actor(&req, state, &body.reason, true)?;
    let expected_version = body.expected_version.map(expected).transpose()?;
    let (written, channel) =
        crate::pools::store::set_channel_enabled(&state.db, &who.ctx(), &code, enabled, expected_version).await?;
    let published = publish_now(state).await;
    // A pool whose ejected members now hold more than its limit is rebuilt without them.
    let mut rebuilt = Vec::new();
    if published && !enabled {
        for pool in &channel.pools {
            let Ok(name) = PoolName::parse(pool) else { continue };
            if rebuild_published_if_needed(state, &name, ReweightMode::Drain).await {
                rebuilt.push(pool.clone());
            }
        }
    }
    Ok(HttpResponse::Ok().json(ChannelSwitched { write: WriteReply::of(&written, published), channel, rebuilt }))
}

/// `POST /api/v1/channels/{code}/disable` with `{"reason", "expected_version"?}`: the
/// channel is ejected from every pool that holds it (each pool republished, audited).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "Changed, and every pool holding the channel republished", body = ChannelSwitched),
        (status = 400, description = "A malformed channel code in the path or a malformed body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "The channel is already disabled", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/disable")]
pub async fn disable_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SwitchBody>,
) -> Result<HttpResponse, ApiError> {
    switch_channel(req, &state, &path, body.into_inner(), false).await
}

/// `POST /api/v1/channels/{code}/enable` with `{"reason", "expected_version"?}`: drawn
/// again in every pool that holds it (unless a pool ejected it on its own).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "Changed, and every pool holding the channel republished", body = ChannelSwitched),
        (status = 400, description = "A malformed channel code in the path or a malformed body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 404, description = "Unknown channel", body = ErrorBody),
        (status = 409, description = "The channel is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "The channel is already enabled", body = ErrorBody),
    ),
)]
#[post("/api/v1/channels/{code}/enable")]
pub async fn enable_channel(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SwitchBody>,
) -> Result<HttpResponse, ApiError> {
    switch_channel(req, &state, &path, body.into_inner(), true).await
}
