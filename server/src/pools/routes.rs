//! The admin API for pools: list, read, create or replace, change weights (`drain` or
//! `immediate`), members, peak windows, caps, eject and restore, rebuild. Every write is
//! one audited change ([`super::store`]), published to Redis at once and through the outbox
//! if that fails.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::pools::{PoolDetail, PoolList, PoolRebuilt, PoolWriteReply};
use client::pool::{PoolName, PoolSnapshot, ReweightMode};
use engine::{Tier, Weights};
use serde::Deserialize;
use serde_json::{json, Value};

use super::edit::{MemberAdd, PoolEdit};
use super::{pool_reply, unknown_pool};
use crate::change::Actor;
use crate::channels::ChannelCode;
use crate::error::ChangeError;
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::http::{actor, expected};
use crate::publish::{publish_now, rebuild_if_needed};
use crate::state::AppState;

/// Every admin route, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_pools)
        .service(get_pool)
        .service(put_pool)
        .service(update_pool_weights)
        .service(add_member)
        .service(eject_member)
        .service(restore_member)
        .service(put_peak_windows)
        .service(put_caps)
        .service(put_window_caps)
        .service(rebuild_pool);
}

/// `GET /api/v1/pools` → every pool: name, kind, version, members, ejected, timezone.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every pool, by name", body = PoolList),
    ),
)]
#[get("/api/v1/pools")]
pub async fn list_pools(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let pools = crate::pools::store::list_pools(&state.db).await?;
    Ok(HttpResponse::Ok().json(PoolList { pools }))
}

/// `GET /api/v1/pools/{pool}` → `{"version", "snapshot", "published_version",
/// "published"}` or 404: `snapshot` is the pool as configured (what `PUT` takes) at
/// configuration version `version` (what `expected_version` is checked against);
/// `published` is the newest snapshot (disabled channels, pins and health applied): what
/// Redis has, or will have once the outbox delivers it.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "`snapshot` is the pool as configured (what `PUT` takes) at configuration version `version`; `published` the newest snapshot published (disabled channels, pins and health applied; null before the first)", body = PoolDetail),
        (status = 400, description = "A malformed pool name", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
    ),
)]
#[get("/api/v1/pools/{pool}")]
pub async fn get_pool(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let Some((version, snapshot)) = crate::pools::store::get_pool(&state.db, &pool).await? else {
        return Err(unknown_pool(&pool));
    };
    let published = crate::publish::store::newest(&state.db, &crate::change::Entity::pool_key(pool)).await?;
    let (published_version, published) = published.unzip();
    Ok(HttpResponse::Ok().json(PoolDetail { version, snapshot, published_version, published }))
}

/// A whole pool to install.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The pool (a snapshot without `version`): `kind` (`channels` | `tiers`), `weights`,
    /// `tiers`, `batch_size`, `low_water`, `ordering`, `timezone`, `peak_windows`, `caps`,
    /// `eject_rebuild_percent`, `ejected`.
    #[schema(value_type = crate::schema::PoolSnapshotBody)]
    snapshot: Value,
    /// The version this change was made against: 0 to create.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(value_type = Option<crate::schema::Reason>)]
    reason: Option<String>,
}

/// `PUT /api/v1/pools/{pool}` with `{"snapshot", "expected_version", "reason"?}`: creates
/// (expected 0) or replaces the pool. Members must be registered channels. 401 without the
/// admin token, 409 on a stale version, 422 naming the field of an invalid snapshot.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Created or replaced, and published: `version` is the configuration version (no `mode`, `rebuilt` or `ejected`)", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body (a snapshot field missing, naming it), a reason over 500 characters, or a negative `expected_version`", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version` (0: it exists already) (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "An invalid snapshot (naming the field), or a member that is not a registered channel or serves another tier", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}")]
pub async fn put_pool(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PutBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let w =
        crate::pools::store::put_pool(&state.db, &who.ctx(), &pool, &body.snapshot, expected(body.expected_version)?)
            .await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(pool_reply(&w, published)))
}

/// A change of weights for a gray release.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightsBody {
    /// `[{"member": "A", "weight": 45}, …]`, integers ≥ 0, not all zero: a channels pool's
    /// channels (the member set), or a tiers pool's tiers.
    #[schema(value_type = Vec<crate::schema::WeightEntry>, min_items = 1)]
    weights: Weights,
    #[schema(value_type = crate::schema::ReweightMode)]
    mode: ReweightMode,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against (`version` of
    /// `GET /api/v1/pools/{pool}`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `POST /api/v1/pools/{pool}/weights` with `{"weights", "mode": "drain"|"immediate",
/// "reason", "expected_version"}`: `drain` lets the remaining tickets be drawn and uses the
/// new weights from the next batch; `immediate` replaces the remaining tickets at once.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body (weights not unique, negative or all zero; an unknown mode), or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The pool would break a rule: an unregistered channel, a tier without channels, a peak window naming a member that left, …", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/weights")]
pub async fn update_pool_weights(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<WeightsBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let weights = body.weights;
    let reply = change_pool(&state, &pool, "pool.weights", &who, Some(body.expected_version), body.mode, move |s| {
        PoolEdit::Weights(weights).apply(s)
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// A channel joining a pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberAddBody {
    /// A registered channel's code.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    channel: ChannelCode,
    /// Default: the channel's base weight.
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    weight: Option<u64>,
    /// A tiers pool's tier for it; default: the channel's own tier.
    #[schema(value_type = Option<crate::schema::Tier>)]
    tier: Option<Tier>,
    /// Most draws per local day.
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    daily_cap: Option<u64>,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against (`version` of
    /// `GET /api/v1/pools/{pool}`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `POST /api/v1/pools/{pool}/members` with `{"channel", "weight"?, "tier"?, "daily_cap"?,
/// "reason", "expected_version"}`: a registered channel joins the pool (drawn from the next
/// batch); its weight defaults to the channel's base weight.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "An unregistered channel, a channel already a member, a tier given for a channels pool or missing for a tiers pool, or weights or a cap that break a rule", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/members")]
pub async fn add_member(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<MemberAddBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let add = {
        let mut conn = state.db.acquire().await?;
        MemberAdd::resolve(&mut conn, &body.channel, body.weight, body.tier, body.daily_cap).await?
    };
    let reply = change_pool(
        &state,
        &pool,
        "pool.member_add",
        &who,
        Some(body.expected_version),
        ReweightMode::Drain,
        move |s| PoolEdit::MemberAdd(add).apply(s),
    )
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// An ejection or a restore.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against (`version` of
    /// `GET /api/v1/pools/{pool}`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

async fn set_member_ejected(
    req: HttpRequest,
    state: &AppState,
    pool: String,
    member: String,
    body: MemberBody,
    eject: bool,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&pool)?;
    let who = actor(&req, state, &body.reason, true)?;
    let action = if eject { "pool.eject" } else { "pool.restore" };
    let reply = change_pool(state, &pool, action, &who, Some(body.expected_version), ReweightMode::Drain, |s| {
        if s.channels().index_of(&member).is_none() {
            return Err(ChangeError::NotFound(format!("pool {:?} has no member {member:?}", pool.as_str())));
        }
        let changed = if eject { s.ejected.insert(member.clone()) } else { s.ejected.remove(&member) };
        if !changed {
            let word = if eject { "already ejected" } else { "not ejected" };
            return Err(ChangeError::Invalid { field: "member".into(), rule: format!("{member:?} is {word}") });
        }
        Ok(())
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// `POST /api/v1/pools/{pool}/members/{member}/eject` with `{"reason","expected_version"}`:
/// the member's tickets are skipped from now on (the pool is rebuilt without it when the
/// ejected members hold more than the pool's `eject_rebuild_percent`); kept in the
/// snapshot, so it survives a Redis restart.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`"), ("member" = String, Path, description = "The member (a channel code) to eject or restore")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool, or the pool has no such member", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry", body = ConflictBody),
        (status = 422, description = "The member is already ejected", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/members/{member}/eject")]
pub async fn eject_member(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<MemberBody>,
) -> Result<HttpResponse, ApiError> {
    let (pool, member) = path.into_inner();
    set_member_ejected(req, &state, pool, member, body.into_inner(), true).await
}

/// `POST /api/v1/pools/{pool}/members/{member}/restore`: the member is drawn again.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`"), ("member" = String, Path, description = "The member (a channel code) to eject or restore")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool, or the pool has no such member", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry", body = ConflictBody),
        (status = 422, description = "The member is not ejected", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/members/{member}/restore")]
pub async fn restore_member(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<MemberBody>,
) -> Result<HttpResponse, ApiError> {
    let (pool, member) = path.into_inner();
    set_member_ejected(req, &state, pool, member, body.into_inner(), false).await
}

/// New peak windows for a pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PeakWindowsBody {
    /// `[{"start": "19:00", "end": "23:00", "multiplier": 3, "weights"?: [...]}]`
    #[schema(value_type = Vec<crate::schema::PeakWindowEntry>)]
    peak_windows: Vec<engine::peak::PeakWindow>,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against (`version` of
    /// `GET /api/v1/pools/{pool}`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `PUT /api/v1/pools/{pool}/peak_windows` with `{"peak_windows", "reason",
/// "expected_version"}`: replaces the pool's peak windows (validated: times `HH:MM`, end ≠
/// start, multiplier ≥ 1, no overlap); the next batch uses them.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body (a time not `HH:MM`, `end` equal to `start`, a multiplier below 1), or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "Windows that break a rule (overlapping, a multiplier over 1000, weights naming a stranger), naming the field", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}/peak_windows")]
pub async fn put_peak_windows(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PeakWindowsBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let windows = body.peak_windows;
    let reply = change_pool(
        &state,
        &pool,
        "pool.peak_windows",
        &who,
        Some(body.expected_version),
        ReweightMode::Drain,
        move |s| PoolEdit::PeakWindows(windows).apply(s),
    )
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// New daily caps for a pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CapsBody {
    /// `{"ALIPAY_A": 100000, …}`: most draws per member per local day, ≥ 1; a member
    /// missing here has no cap.
    #[serde(deserialize_with = "crate::inputs::integer_values")]
    #[schema(value_type = std::collections::BTreeMap<String, crate::schema::Cap>)]
    caps: std::collections::BTreeMap<String, u64>,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against (`version` of
    /// `GET /api/v1/pools/{pool}`).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `PUT /api/v1/pools/{pool}/caps` with `{"caps", "reason", "expected_version"}`: replaces
/// the pool's per-member daily caps.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version (the next change's `expected_version`); `mode`, `rebuilt` and `ejected` say how it reached the tickets", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`: read it again and retry (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "A cap outside 1..=2^53−1, or for a channel that is not a member", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}/caps")]
pub async fn put_caps(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<CapsBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let caps = body.caps;
    let reply =
        change_pool(&state, &pool, "pool.caps", &who, Some(body.expected_version), ReweightMode::Drain, move |s| {
            PoolEdit::Caps(caps).apply(s)
        })
        .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// New short-window caps for a pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowCapsBody {
    /// `{"minutes": 10, "caps": {"U_1": 500}}`: most draws per member in each window of
    /// `minutes` (1..=1440, aligned to the epoch: :00, :10, … for 10), besides the daily
    /// caps; `null` removes them.
    #[schema(value_type = Option<crate::schema::WindowCapsEntry>)]
    window_caps: Option<engine::caps::WindowCaps>,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version this change was made against.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `PUT /api/v1/pools/{pool}/window_caps` with `{"window_caps", "reason",
/// "expected_version"}`: replaces the pool's short-window caps (the draw script enforces
/// them with counters that expire with their window).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Changed and published: `version` is the configuration version", body = PoolWriteReply),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version` (a `ConflictBody`); or an approval policy applies to the pool (an `ErrorBody` naming `policy`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "Minutes outside 1..=1440, no cap, a cap outside 1..=2^53−1, or for a channel that is not a member", body = ErrorBody),
    ),
)]
#[put("/api/v1/pools/{pool}/window_caps")]
pub async fn put_window_caps(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<WindowCapsBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let window = body.window_caps;
    let reply = change_pool(
        &state,
        &pool,
        "pool.window_caps",
        &who,
        Some(body.expected_version),
        ReweightMode::Drain,
        move |s| PoolEdit::WindowCaps(window).apply(s),
    )
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// A rebuild request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebuildBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `POST /api/v1/pools/{pool}/rebuild` with `{"reason"}`: replaces the remaining tickets
/// with a fresh batch from the published snapshot (audited). 503 when Redis cannot do it.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("pool" = PoolName, Path, description = "The pool: 1..=64 of `[A-Za-z0-9_-]`")),
    responses(
        (status = 200, description = "Rebuilt and audited: `version` is the configuration version", body = PoolRebuilt),
        (status = 400, description = "A malformed pool name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown pool", body = ErrorBody),
        (status = 422, description = "No member can be drawn (every member ejected or at weight 0), naming `pool`", body = ErrorBody),
        (status = 503, description = "Redis could not rebuild the pool (any other failure), or Postgres is unreachable", body = ErrorBody),
    ),
)]
#[post("/api/v1/pools/{pool}/rebuild")]
pub async fn rebuild_pool(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<RebuildBody>,
) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let Some((version, _)) = crate::pools::store::get_pool(&state.db, &pool).await? else {
        return Err(unknown_pool(&pool));
    };
    // The audit row is written first and committed only once the rebuild is done: a
    // failed rebuild leaves no row, and a rebuild never happens without one being ready.
    let mut tx = state.db.begin().await?;
    let audit_id = crate::change::store::audit(
        &mut tx,
        &who.ctx(),
        &crate::change::Entity::pool_key(&pool),
        "pool.rebuild",
        None,
        Some(&json!({"version": version})),
    )
    .await?;
    state.pool_admin.rebuild(&pool).await.map_err(|e| match e {
        // What the pool's configuration and health leave drawable, not Redis, is at fault.
        client::pool::PoolError::NothingDrawable(why) => {
            ApiError::Unprocessable { field: "pool".into(), rule: format!("no member can be drawn: {why}") }
        }
        e => ApiError::Unavailable(format!("rebuilding pool {:?} failed: {e}", pool.as_str())),
    })?;
    crate::gate::break_glass::store::flag(&mut tx, &who.ctx(), &pool, "pool.rebuild", audit_id).await?;
    tx.commit().await?;
    Ok(HttpResponse::Ok().json(PoolRebuilt {
        entity: crate::change::Entity::pool_key(pool),
        version,
        audit_id,
        rebuilt: true,
    }))
}

/// Changes a pool and publishes it; `immediate` (or an ejection past the pool's limit)
/// then replaces its remaining tickets. Answers what was written.
#[allow(clippy::too_many_arguments)] // each is one fact of the change
async fn change_pool(
    state: &AppState,
    pool: &PoolName,
    action: &str,
    who: &Actor,
    expected_version: Option<i64>,
    mode: ReweightMode,
    edit: impl FnOnce(&mut PoolSnapshot) -> Result<(), ChangeError>,
) -> Result<PoolWriteReply, ApiError> {
    let w = super::store::modify_pool(&state.db, &who.ctx(), pool, action, expected_version, edit).await?;
    let published = publish_now(state).await;
    // Decided on what the pool publishes: health's ejections count too.
    let rebuilt = published && rebuild_if_needed(state, pool, &w.published, mode).await;
    Ok(PoolWriteReply {
        mode: Some(mode.as_str().to_owned()),
        rebuilt: Some(rebuilt),
        ejected: Some(w.published.ejected.iter().cloned().collect()),
        ..pool_reply(&w, published)
    })
}
