//! The admin API for pools and tenants: read the current snapshot, replace it, change a
//! pool's weights (`drain` or `immediate`). Every write is one audited change
//! (`db::change`), published to Redis at once and through the outbox if that fails.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use client::pool::{PoolName, ReweightMode};
use client::quota::TenantId;
use engine::Weights;
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::db::audit::Source;
use crate::db::change::{apply_change, Change, ChangeError};
use crate::error::ApiError;
use crate::routes::audit::db_error;
use crate::state::AppState;

/// The actor of a request bearing the configured admin token.
fn authorize<'s>(req: &HttpRequest, state: &'s AppState) -> Result<&'s str, ApiError> {
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

fn request_id(req: &HttpRequest) -> Option<String> {
    req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(|v| v.chars().take(200).collect())
}

fn reason(raw: &Option<String>, required: bool) -> Result<Option<String>, ApiError> {
    match raw.as_deref().map(str::trim) {
        None | Some("") if required => Err(ApiError::bad_request("reason", "is required")),
        None | Some("") => Ok(None),
        Some(r) if r.chars().count() > 500 => Err(ApiError::bad_request("reason", "must be at most 500 characters")),
        Some(r) => Ok(Some(r.to_owned())),
    }
}

fn change_error(e: ChangeError) -> ApiError {
    match e {
        ChangeError::Conflict { entity, expected, current } => ApiError::Conflict { entity, expected, current },
        ChangeError::Invalid { field, rule } => ApiError::Unprocessable { field, rule },
        ChangeError::Db(e) => db_error(e),
    }
}

async fn current(state: &AppState, entity: &str) -> Result<Option<(i64, Value)>, ApiError> {
    sqlx::query_as("select version, body from snapshot where entity = $1 order by version desc limit 1")
        .bind(entity)
        .fetch_optional(&state.db)
        .await
        .map_err(db_error)
}

/// Publishes right away (best effort: the outbox delivers it otherwise); says whether it did.
async fn publish_now(state: &AppState) -> bool {
    match crate::publish::drain_outbox(state).await {
        Ok(done) => done.failed.is_empty(),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "publishing after a change failed; the outbox retries");
            false
        }
    }
}

/// Records one API change (an audited change of `entity` to `body`, made against
/// `expected_version`) and publishes it at once; returns what was written and whether
/// Redis has it already.
#[allow(clippy::too_many_arguments)] // each is one fact of the change; a struct would only rename them
async fn record_change(
    req: &HttpRequest,
    state: &AppState,
    actor: &str,
    entity: &str,
    action: &str,
    reason: Option<&str>,
    body: &Value,
    expected_version: i64,
) -> Result<(crate::db::change::Applied, bool), ApiError> {
    let request_id = request_id(req);
    let applied = apply_change(
        &state.db,
        &Change {
            entity,
            action,
            actor,
            source: Source::Api,
            reason,
            request_id: request_id.as_deref(),
            body,
            expected_version: Some(expected_version),
        },
    )
    .await
    .map_err(change_error)?;
    Ok((applied, publish_now(state).await))
}

/// A whole snapshot to install.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutBody {
    /// The new body (a pool snapshot or a tenant quota, without `version`).
    snapshot: Value,
    /// The version this change was made against: 0 to create.
    expected_version: i64,
    reason: Option<String>,
}

async fn put_entity(req: HttpRequest, state: &AppState, entity: String, action: &str, body: PutBody) -> Result<HttpResponse, ApiError> {
    let actor = authorize(&req, state)?;
    let reason = reason(&body.reason, false)?;
    if body.expected_version < 0 {
        return Err(ApiError::bad_request("expected_version", "must be 0 (create) or the current version"));
    }
    let (applied, published) =
        record_change(&req, state, actor, &entity, action, reason.as_deref(), &body.snapshot, body.expected_version).await?;
    Ok(HttpResponse::Ok().json(json!({
        "entity": entity, "version": applied.version, "audit_id": applied.audit.id, "published": published,
    })))
}

/// `GET /api/v1/pools/{pool}` → `{"version", "snapshot"}` or 404.
#[get("/api/v1/pools/{pool}")]
pub async fn get_pool(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    match current(&state, &format!("pool:{pool}")).await? {
        Some((version, snapshot)) => Ok(HttpResponse::Ok().json(json!({"version": version, "snapshot": snapshot}))),
        None => Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str()))),
    }
}

/// `PUT /api/v1/pools/{pool}` with `{"snapshot", "expected_version", "reason"?}`: creates
/// (expected 0) or replaces the pool. 401 without the admin token, 409 on a stale version,
/// 422 naming the field of an invalid snapshot.
#[put("/api/v1/pools/{pool}")]
pub async fn put_pool(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PutBody>) -> Result<HttpResponse, ApiError> {
    let pool = PoolName::parse(&path)?;
    put_entity(req, &state, format!("pool:{pool}"), "pool.put", body.into_inner()).await
}

/// A weights change for a gray release.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsBody {
    /// `[{"member": "A", "weight": 45}, …]`, integers ≥ 0, not all zero.
    weights: Weights,
    mode: ReweightMode,
    reason: Option<String>,
    expected_version: i64,
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
    let actor = authorize(&req, &state)?;
    let reason = reason(&body.reason, true)?;
    let entity = format!("pool:{pool}");
    let Some((_, mut snapshot)) = current(&state, &entity).await? else {
        return Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    };
    snapshot["weights"] = serde_json::to_value(&body.weights).map_err(anyhow::Error::from)?;
    let (applied, mut published) =
        record_change(&req, &state, actor, &entity, "pool.weights", reason.as_deref(), &snapshot, body.expected_version).await?;
    if published && body.mode == ReweightMode::Immediate {
        if let Err(e) = state.pool_admin.rebuild(&pool).await {
            tracing::warn!(pool = %pool, error = %e, "immediate reweight: rebuild failed; the next batch uses the new weights");
            published = false;
        }
    }
    Ok(HttpResponse::Ok().json(json!({
        "entity": entity, "version": applied.version, "audit_id": applied.audit.id,
        "mode": body.mode, "published": published,
    })))
}

/// `GET /api/v1/tenants/{tenant}` → `{"version", "snapshot"}` or 404.
#[get("/api/v1/tenants/{tenant}")]
pub async fn get_tenant(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = TenantId::parse(&path)?;
    match current(&state, &format!("tenant:{tenant}")).await? {
        Some((version, snapshot)) => Ok(HttpResponse::Ok().json(json!({"version": version, "snapshot": snapshot}))),
        None => Err(ApiError::NotFound(format!("unknown tenant {:?}", tenant.as_str()))),
    }
}

/// `PUT /api/v1/tenants/{tenant}`: creates or replaces a tenant's quota (plan, grants,
/// fallback policy), as for pools.
#[put("/api/v1/tenants/{tenant}")]
pub async fn put_tenant(req: HttpRequest, state: web::Data<AppState>, path: web::Path<String>, body: web::Json<PutBody>) -> Result<HttpResponse, ApiError> {
    let tenant = TenantId::parse(&path)?;
    put_entity(req, &state, format!("tenant:{tenant}"), "tenant.put", body.into_inner()).await
}

/// An ejection or a restore.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberBody {
    reason: Option<String>,
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
    let actor = authorize(&req, state)?;
    let reason = reason(&body.reason, true)?;
    let entity = format!("pool:{pool}");
    let Some((_, mut snapshot)) = current(state, &entity).await? else {
        return Err(ApiError::NotFound(format!("unknown pool {:?}", pool.as_str())));
    };
    let mut ejected: std::collections::BTreeSet<String> =
        serde_json::from_value(snapshot.get("ejected").cloned().unwrap_or(json!([]))).unwrap_or_default();
    let changed = if eject { ejected.insert(member.clone()) } else { ejected.remove(&member) };
    if !changed {
        let state_word = if eject { "already ejected" } else { "not ejected" };
        return Err(ApiError::Unprocessable { field: "member".into(), rule: format!("{member:?} is {state_word}") });
    }
    snapshot["ejected"] = json!(ejected);
    let (applied, published) =
        record_change(&req, state, actor, &entity, if eject { "pool.eject" } else { "pool.restore" }, reason.as_deref(), &snapshot, body.expected_version).await?;
    // Ejecting members that hold more than the pool's limit rebuilds it without them, so
    // draws do not skip most tickets.
    let mut rebuilt = false;
    if eject && published {
        let parsed: Option<client::pool::PoolSnapshot> = {
            let mut versioned = snapshot.clone();
            versioned["version"] = json!(applied.version);
            serde_json::from_value(versioned).ok()
        };
        if let Some(s) = parsed {
            if s.ejected_percent() > f64::from(s.eject_rebuild_percent) {
                rebuilt = state.pool_admin.rebuild(&pool).await.is_ok();
            }
        }
    }
    Ok(HttpResponse::Ok().json(json!({
        "entity": entity, "version": applied.version, "audit_id": applied.audit.id,
        "ejected": ejected, "published": published, "rebuilt": rebuilt,
    })))
}

/// `POST /api/v1/pools/{pool}/members/{member}/eject` with `{"reason","expected_version"}`:
/// the member's tickets are skipped from now on (the pool is rebuilt without it when the
/// ejected members hold more than the pool's `eject_rebuild_percent`); kept in the
/// snapshot, so it survives a Redis restart.
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
