//! The admin API for pools: list, read, create or replace, change weights (`drain` or
//! `immediate`), members, peak windows, caps, eject and restore, rebuild. Every write is
//! one audited change (`db::config`), published to Redis at once and through the outbox if
//! that fails. Channels, plans, tenants and grants are in [`super::config`].

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use client::pool::{PoolName, PoolSnapshot, ReweightMode};
use engine::{Tier, Weights};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::db::audit::Source;
use crate::db::change::ChangeError;
use crate::db::config::{self, ChannelCode, Ctx, Written};
use crate::error::ApiError;
use crate::routes::audit::db_error;
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
        .service(rebuild_pool);
    super::config::configure(cfg);
    super::channel_health::configure(cfg);
}

/// The actor of a request bearing the configured admin token.
pub(crate) fn authorize<'s>(req: &HttpRequest, state: &'s AppState) -> Result<&'s str, ApiError> {
    let Some(admin) = &state.admin else {
        return Err(ApiError::Unauthorized("the admin API is disabled: set admin.token (TESSERA_ADMIN_TOKEN)".into()));
    };
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let expected = admin.token.expose_secret().as_bytes();
    // Compared in constant time (for equal lengths) so the token cannot be guessed byte by byte.
    let matches = given.len() == expected.len()
        && given.as_bytes().iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if matches {
        Ok(admin.actor.as_str())
    } else {
        Err(ApiError::Unauthorized("missing or wrong bearer token".into()))
    }
}

pub(crate) fn request_id(req: &HttpRequest) -> Option<String> {
    req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(|v| v.chars().take(200).collect())
}

/// A change's reason: trimmed, at most 500 characters; `required` refuses a missing one.
pub(crate) fn reason(raw: &Option<String>, required: bool) -> Result<Option<String>, ApiError> {
    match raw.as_deref().map(str::trim) {
        None | Some("") if required => Err(ApiError::bad_request("reason", "is required")),
        None | Some("") => Ok(None),
        Some(r) if r.chars().count() > 500 => Err(ApiError::bad_request("reason", "must be at most 500 characters")),
        Some(r) if r.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => {
            Err(ApiError::bad_request("reason", "must not hold control characters"))
        }
        Some(r) => Ok(Some(r.to_owned())),
    }
}

pub(crate) fn expected(field_value: i64) -> Result<i64, ApiError> {
    if field_value < 0 {
        return Err(ApiError::bad_request("expected_version", "must be 0 (create) or the current version"));
    }
    Ok(field_value)
}

pub(crate) fn change_error(e: ChangeError) -> ApiError {
    match e {
        ChangeError::Conflict { entity, expected, current } => ApiError::Conflict { entity, expected, current },
        ChangeError::Invalid { field, rule } => ApiError::Unprocessable { field, rule },
        ChangeError::Duplicate { field, rule } => ApiError::Duplicate { field, rule },
        ChangeError::Malformed { field, rule } => ApiError::BadRequest { field, rule },
        ChangeError::NotFound(what) => ApiError::NotFound(what),
        ChangeError::Db(e) => db_error(e),
    }
}

/// Who made the change and why, for every row it writes.
pub(crate) struct Actor<'s> {
    pub actor: &'s str,
    pub reason: Option<String>,
    pub request_id: Option<String>,
}

impl Actor<'_> {
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx { actor: self.actor, source: Source::Api, reason: self.reason.as_deref(), request_id: self.request_id.as_deref() }
    }
}

/// Authorizes a write and takes its reason.
pub(crate) fn actor<'s>(req: &HttpRequest, state: &'s AppState, raw_reason: &Option<String>, required: bool) -> Result<Actor<'s>, ApiError> {
    let actor = authorize(req, state)?;
    Ok(Actor { actor, reason: reason(raw_reason, required)?, request_id: request_id(req) })
}

/// Publishes right away (best effort: the outbox delivers it otherwise); says whether it did.
pub(crate) async fn publish_now(state: &AppState) -> bool {
    match crate::publish::drain_outbox(state).await {
        Ok(done) => done.failed.is_empty(),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "publishing after a change failed; the outbox retries");
            false
        }
    }
}

/// The reply to a write: what it wrote and whether Redis has it already.
pub(crate) fn written_json(written: &[Written], published: bool) -> Value {
    let first = &written[0];
    json!({
        "entity": first.entity, "version": first.version, "audit_id": first.audit_id,
        "published": published, "changes": written,
    })
}

/// The reply to a pool change: `version` is the configuration version (the next change's
/// `expected_version`), `published_version` the snapshot Redis gets.
fn pool_reply(w: &config::PoolWritten, published: bool) -> Value {
    let mut reply = written_json(std::slice::from_ref(&w.written), published);
    reply["version"] = json!(w.config_version);
    reply["published_version"] = json!(w.written.version);
    reply
}

fn unknown_pool(pool: &PoolName) -> ApiError {
    ApiError::NotFound(format!("unknown pool {:?}", pool.as_str()))
}

/// `GET /api/v1/pools` → every pool: name, kind, version, members, ejected, timezone.
#[get("/api/v1/pools")]
pub async fn list_pools(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let pools = config::list_pools(&state.db).await.map_err(db_error)?;
    Ok(HttpResponse::Ok().json(json!({ "pools": pools })))
}

/// `GET /api/v1/pools/{pool}` → `{"version", "snapshot", "published_version",
/// "published"}` or 404: `snapshot` is the pool as configured (what `PUT` takes) at
/// configuration version `version` (what `expected_version` is checked against);
/// `published` is what Redis got (disabled channels, pins and health applied).
#[get("/api/v1/pools/{pool}")]
pub async fn get_pool(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let Some((version, snapshot)) = config::get_pool(&state.db, &pool).await.map_err(db_error)? else {
        return Err(unknown_pool(&pool));
    };
    let published: Option<(i64, Value)> =
        sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
            .bind(format!("pool:{pool}"))
            .fetch_optional(&state.db)
            .await
            .map_err(db_error)?;
    let (published_version, published) = published.unzip();
    Ok(HttpResponse::Ok().json(json!({
        "version": version, "snapshot": snapshot, "published_version": published_version, "published": published,
    })))
}

/// A whole pool to install.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The pool (a snapshot without `version`).
    snapshot: Value,
    /// The version this change was made against: 0 to create.
    expected_version: i64,
    reason: Option<String>,
}

/// `PUT /api/v1/pools/{pool}` with `{"snapshot", "expected_version", "reason"?}`: creates
/// (expected 0) or replaces the pool. Members must be registered channels. 401 without the
/// admin token, 409 on a stale version, 422 naming the field of an invalid snapshot.
#[put("/api/v1/pools/{pool}")]
pub async fn put_pool(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PutBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let w = config::put_pool(&state.db, &who.ctx(), &pool, &body.snapshot, expected(body.expected_version)?)
        .await
        .map_err(change_error)?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(pool_reply(&w, published)))
}

/// A change of weights for a gray release.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsBody {
    /// `[{"member": "A", "weight": 45}, …]`, integers ≥ 0, not all zero: a channels pool's
    /// channels (the member set), or a tiers pool's tiers.
    weights: Weights,
    mode: ReweightMode,
    reason: Option<String>,
    expected_version: i64,
}

/// Changes a pool and publishes it; `immediate` (or an ejection past the pool's limit)
/// then replaces its remaining tickets. Answers what was written.
#[allow(clippy::too_many_arguments)] // each is one fact of the change
async fn change_pool(
    state: &AppState,
    pool: &PoolName,
    action: &str,
    who: &Actor<'_>,
    expected_version: Option<i64>,
    mode: ReweightMode,
    edit: impl FnOnce(&mut PoolSnapshot) -> Result<(), ChangeError>,
) -> Result<Value, ApiError> {
    let w = config::modify_pool(&state.db, &who.ctx(), pool, action, expected_version, edit)
        .await
        .map_err(change_error)?;
    let published = publish_now(state).await;
    // Decided on what the pool publishes: health's ejections count too.
    let rebuilt = published && rebuild_if_needed(state, pool, &w.published, mode).await;
    let mut reply = pool_reply(&w, published);
    reply["mode"] = json!(mode);
    reply["rebuilt"] = json!(rebuilt);
    reply["ejected"] = json!(w.published.ejected);
    Ok(reply)
}

/// Replaces the remaining tickets with a fresh batch when the change asks for it at once,
/// or when ejected members hold more than the pool's limit (so draws do not skip most
/// tickets). Says whether it did.
pub(crate) async fn rebuild_if_needed(state: &AppState, pool: &PoolName, snapshot: &PoolSnapshot, mode: ReweightMode) -> bool {
    let needed = mode == ReweightMode::Immediate || snapshot.ejected_percent() > f64::from(snapshot.eject_rebuild_percent);
    if !needed {
        return false;
    }
    match state.pool_admin.rebuild(pool).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pool = %pool, error = %e, "rebuild after a change failed; the next batch uses the new configuration");
            false
        }
    }
}

/// `POST /api/v1/pools/{pool}/weights` with `{"weights", "mode": "drain"|"immediate",
/// "reason", "expected_version"}`: `drain` lets the remaining tickets be drawn and uses the
/// new weights from the next batch; `immediate` replaces the remaining tickets at once.
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
        if matches!(s.kind, client::pool::PoolKind::Channels) {
            // Caps and ejections of members that leave go with them.
            s.caps.retain(|m, _| weights.index_of(m).is_some());
            s.ejected.retain(|m| weights.index_of(m).is_some());
        }
        s.weights = weights;
        Ok(())
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// A channel joining a pool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberAddBody {
    channel: ChannelCode,
    /// Default: the channel's base weight.
    weight: Option<u64>,
    /// A tiers pool's tier for it; default: the channel's own tier.
    tier: Option<Tier>,
    /// Most draws per local day.
    daily_cap: Option<u64>,
    reason: Option<String>,
    expected_version: i64,
}

/// `POST /api/v1/pools/{pool}/members` with `{"channel", "weight"?, "tier"?, "daily_cap"?,
/// "reason", "expected_version"}`: a registered channel joins the pool (drawn from the next
/// batch); its weight defaults to the channel's base weight.
#[post("/api/v1/pools/{pool}/members")]
pub async fn add_member(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<MemberAddBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let channel = config::get_channel(&state.db, &body.channel)
        .await
        .map_err(db_error)?
        .ok_or_else(|| ApiError::Unprocessable { field: "channel".into(), rule: format!("unknown channel {:?}: register it first", body.channel.as_str()) })?;
    let weight = body.weight.unwrap_or(channel.base_weight as u64);
    let code = channel.code.clone();
    let channel_tier: Option<Tier> = channel.tier.as_deref().and_then(|t| t.parse().ok());
    let reply = change_pool(&state, &pool, "pool.member_add", &who, Some(body.expected_version), ReweightMode::Drain, move |s| {
        let add = |weights: &Weights| -> Result<Weights, ChangeError> {
            if weights.index_of(&code).is_some() {
                return Err(ChangeError::Invalid { field: "channel".into(), rule: format!("{code:?} is already a member") });
            }
            let mut pairs: Vec<(String, u64)> = weights.iter().map(|(m, w)| (m.to_owned(), w)).collect();
            pairs.push((code.clone(), weight));
            Weights::from_integers(pairs).map_err(|e| ChangeError::Invalid { field: "weight".into(), rule: e.to_string() })
        };
        match s.kind {
            client::pool::PoolKind::Channels => {
                if body.tier.is_some() {
                    return Err(ChangeError::Invalid { field: "tier".into(), rule: "only a tiers pool places channels in tiers".into() });
                }
                s.weights = add(&s.weights)?;
            }
            client::pool::PoolKind::Tiers => {
                let tier = body.tier.or(channel_tier).ok_or_else(|| ChangeError::Invalid {
                    field: "tier".into(),
                    rule: "is required: the channel has no tier of its own".into(),
                })?;
                if s.channels().index_of(&code).is_some() {
                    return Err(ChangeError::Invalid { field: "channel".into(), rule: format!("{code:?} is already a member") });
                }
                let updated = match s.tiers.get(&tier) {
                    Some(existing) => add(existing)?,
                    None => Weights::from_integers([(code.clone(), weight)]).map_err(|e| ChangeError::Invalid { field: "weight".into(), rule: e.to_string() })?,
                };
                s.tiers.insert(tier, updated);
            }
        }
        if let Some(cap) = body.daily_cap {
            s.caps.insert(code.clone(), cap);
        }
        Ok(())
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// An ejection or a restore.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberBody {
    reason: Option<String>,
    expected_version: i64,
}

async fn set_member_ejected(req: HttpRequest, state: &AppState, pool: String, member: String, body: MemberBody, eject: bool) -> Result<HttpResponse, ApiError> {
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
#[post("/api/v1/pools/{pool}/members/{member}/eject")]
pub async fn eject_member(req: HttpRequest, state: web::Data<AppState>, path: web::Path<(String, String)>, body: web::Json<MemberBody>) -> Result<HttpResponse, ApiError> {
    let (pool, member) = path.into_inner();
    set_member_ejected(req, &state, pool, member, body.into_inner(), true).await
}

/// `POST /api/v1/pools/{pool}/members/{member}/restore`: the member is drawn again.
#[post("/api/v1/pools/{pool}/members/{member}/restore")]
pub async fn restore_member(req: HttpRequest, state: web::Data<AppState>, path: web::Path<(String, String)>, body: web::Json<MemberBody>) -> Result<HttpResponse, ApiError> {
    let (pool, member) = path.into_inner();
    set_member_ejected(req, &state, pool, member, body.into_inner(), false).await
}

/// New peak windows for a pool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakWindowsBody {
    /// `[{"start": "19:00", "end": "23:00", "multiplier": 3, "weights"?: [...]}]`
    peak_windows: Vec<engine::peak::PeakWindow>,
    reason: Option<String>,
    expected_version: i64,
}

/// `PUT /api/v1/pools/{pool}/peak_windows` with `{"peak_windows", "reason",
/// "expected_version"}`: replaces the pool's peak windows (validated: times `HH:MM`, end ≠
/// start, multiplier ≥ 1, no overlap); the next batch uses them.
#[put("/api/v1/pools/{pool}/peak_windows")]
pub async fn put_peak_windows(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PeakWindowsBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let windows = body.peak_windows;
    let reply = change_pool(&state, &pool, "pool.peak_windows", &who, Some(body.expected_version), ReweightMode::Drain, move |s| {
        s.peak_windows = windows;
        Ok(())
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// New daily caps for a pool.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapsBody {
    /// `{"ALIPAY_A": 100000, …}`: most draws per member per local day, ≥ 1; a member
    /// missing here has no cap.
    caps: std::collections::BTreeMap<String, u64>,
    reason: Option<String>,
    expected_version: i64,
}

/// `PUT /api/v1/pools/{pool}/caps` with `{"caps", "reason", "expected_version"}`: replaces
/// the pool's per-member daily caps.
#[put("/api/v1/pools/{pool}/caps")]
pub async fn put_caps(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<CapsBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let body = body.into_inner();
    let caps = body.caps;
    let reply = change_pool(&state, &pool, "pool.caps", &who, Some(body.expected_version), ReweightMode::Drain, move |s| {
        s.caps = caps;
        Ok(())
    })
    .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// A rebuild request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebuildBody {
    reason: Option<String>,
}

/// `POST /api/v1/pools/{pool}/rebuild` with `{"reason"}`: replaces the remaining tickets
/// with a fresh batch from the published snapshot (audited). 503 when Redis cannot do it.
#[post("/api/v1/pools/{pool}/rebuild")]
pub async fn rebuild_pool(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<RebuildBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let Some((version, _)) = config::get_pool(&state.db, &pool).await.map_err(db_error)? else {
        return Err(unknown_pool(&pool));
    };
    let outcome = state
        .pool_admin
        .rebuild(&pool)
        .await
        .map_err(|e| ApiError::Unavailable(format!("rebuilding pool {:?} failed: {e}", pool.as_str())))?;
    let audit_id = config::audit_pool_operation(&state.db, &who.ctx(), &pool, "pool.rebuild", &json!({"version": version, "outcome": format!("{outcome:?}")}))
        .await
        .map_err(change_error)?;
    Ok(HttpResponse::Ok().json(json!({"entity": format!("pool:{pool}"), "version": version, "audit_id": audit_id, "rebuilt": true})))
}
