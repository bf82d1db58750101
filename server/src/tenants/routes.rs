//! The admin API for tenants and their grants. Reads need permission `read`, writes `edit`.
//! Every change republishes the tenant.

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::tenants::{TenantList, TenantRestored};
use api::WriteReply;
use client::quota::{GrantId, GrantKind, TenantId, Tokens};
use serde::Deserialize;

use super::{store, NewGrant, TenantSpec};
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::http::{actor, expected};
use crate::inputs::exact_integer;
use crate::publish::publish_now;
use crate::state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_tenants)
        .service(get_tenant)
        .service(put_tenant)
        .service(add_grant)
        .service(revoke_grant)
        .service(tenant_versions)
        .service(restore_tenant);
}

fn tenant_id(raw: &str) -> Result<TenantId, ApiError> {
    Ok(TenantId::parse(raw)?)
}

/// `GET /api/v1/tenants` → every tenant: name, plan, version, live grants.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Every tenant, by name: plan, version, and live grants", body = TenantList),
    ),
)]
#[get("/api/v1/tenants")]
pub async fn list_tenants(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let tenants = store::list_tenants(&state.db).await?;
    Ok(HttpResponse::Ok().json(TenantList { tenants }))
}

/// `GET /api/v1/tenants/{tenant}` → plan, settings, every grant (revoked ones marked), the
/// version and the published snapshot; or 404.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The tenant: settings, every grant (revoked ones with `revoked_at`), the version and the published snapshot", body = super::Tenant),
        (status = 400, description = "A malformed tenant name", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants/{tenant}")]
pub async fn get_tenant(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    match store::get_tenant(&state.db, &tenant).await? {
        Some(t) => Ok(HttpResponse::Ok().json(t)),
        None => Err(ApiError::NotFound(format!("unknown tenant {:?}", tenant.as_str()))),
    }
}

/// A tenant's plan and settings.
#[derive(Debug, Deserialize)]
pub struct TenantBody {
    #[serde(flatten)]
    spec: serde_json::Map<String, serde_json::Value>,
}

/// `PUT /api/v1/tenants/{tenant}` with `{"plan", "reservation_ttl_ms"?, "retention_days"?,
/// "fallback"?, "expected_version", "reason"?}`: creates (expected 0) or changes the
/// tenant; its quota is republished.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    request_body(content = crate::schema::TenantSettings, description = "The tenant's plan and settings; fields left out take the defaults"),
    responses(
        (status = 200, description = "Created or changed, and its quota republished", body = WriteReply),
        (status = 400, description = "A malformed tenant name or body, naming the field: an unknown field, a missing `expected_version`, a `reason` that is not a string", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version` (0: it exists already) (a `ConflictBody`), or the `tenants` approval policy applies (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "An unknown plan, or a setting out of range (`reservation_ttl_ms`, `retention_days`, `idempotency_window_ms`)", body = ErrorBody),
    ),
)]
#[put("/api/v1/tenants/{tenant}")]
pub async fn put_tenant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<TenantBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let mut fields = body.into_inner().spec;
    let reason_raw = match fields.remove("reason") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(_) => return Err(ApiError::bad_request("reason", "must be a string")),
    };
    let who = actor(&req, &state, &reason_raw, false)?;
    let expected_version = match fields.remove("expected_version") {
        Some(v) => {
            let version = v.as_number().and_then(exact_integer).and_then(|v| i64::try_from(v).ok());
            expected(version.ok_or_else(|| ApiError::bad_request("expected_version", "must be an integer"))?)?
        }
        None => return Err(ApiError::bad_request("expected_version", "is required (0 to create)")),
    };
    const KNOWN: [&str; 5] = ["plan", "reservation_ttl_ms", "retention_days", "idempotency_window_ms", "fallback"];
    if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            unknown.clone(),
            format!("unknown field; expected one of {KNOWN:?}, expected_version, reason"),
        ));
    }
    // The integer settings, named in their refusal (serde's own message names no field).
    for name in ["reservation_ttl_ms", "retention_days", "idempotency_window_ms"] {
        if let Some(value) = fields.get(name) {
            if value.as_number().and_then(exact_integer).is_none() {
                return Err(ApiError::bad_request(name, format!("must be an integer, got {value}")));
            }
        }
    }
    let spec: TenantSpec = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| ApiError::from_serde_message(&e.to_string()))?;
    let written = store::put_tenant(&state.db, &who.ctx(), &tenant, &spec, expected_version).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(WriteReply::of(&[written], published)))
}

/// A grant to add.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    /// The grant's id, unique for the tenant forever: 1..=64 of `[A-Za-z0-9_-]`, not `plan`.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    id: GrantId,
    /// `temporary` or `bonus`.
    #[schema(value_type = crate::schema::GrantKind)]
    kind: String,
    /// Bonus grants only: lower pays first (default 0).
    #[schema(maximum = 2147483647)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    priority: Option<u32>,
    /// Tokens granted, 1..=2^53−1.
    #[schema(value_type = u64, minimum = 1, maximum = 9007199254740991_u64)]
    amount: serde_json::Number,
    /// When the grant starts paying (default: at once).
    starts_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it stops (default: never); after `starts_at` and after now.
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    expected_version: Option<i64>,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    #[schema(value_type = Option<crate::schema::Reason>)]
    reason: Option<String>,
}

/// A grant to add as documented: a temporary grant, or a bonus grant (only a bonus grant has
/// a priority). [`GrantBody`] reads either and refuses the rest, naming the field.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum GrantRequest {
    Temporary(TemporaryGrant),
    Bonus(BonusGrant),
}

/// `temporary`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TemporaryKind {
    Temporary,
}

/// `bonus`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum BonusKind {
    Bonus,
}

/// A temporary grant: its tokens pay after every bonus, soonest expiry first.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemporaryGrant {
    /// The grant's id, unique for the tenant forever: 1..=64 of `[A-Za-z0-9_-]`, not `plan`.
    #[schema(pattern = "^(?!plan$)[A-Za-z0-9_-]{1,64}$")]
    pub id: String,
    pub kind: TemporaryKind,
    /// Tokens granted, 1..=2^53−1.
    #[schema(minimum = 1, maximum = 9007199254740991_u64)]
    pub amount: u64,
    /// When the grant starts paying (default: at once).
    pub starts_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it stops (default: never); after `starts_at` and after now (422 otherwise).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    pub expected_version: Option<i64>,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    pub reason: Option<crate::schema::Reason>,
}

/// A bonus grant: its tokens pay first, lower `priority` first.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BonusGrant {
    /// The grant's id, unique for the tenant forever: 1..=64 of `[A-Za-z0-9_-]`, not `plan`.
    #[schema(pattern = "^(?!plan$)[A-Za-z0-9_-]{1,64}$")]
    pub id: String,
    pub kind: BonusKind,
    /// Lower pays first (default 0).
    #[schema(maximum = 2147483647)]
    pub priority: Option<u32>,
    /// Tokens granted, 1..=2^53−1.
    #[schema(minimum = 1, maximum = 9007199254740991_u64)]
    pub amount: u64,
    /// When the grant starts paying (default: at once).
    pub starts_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it stops (default: never); after `starts_at` and after now (422 otherwise).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    pub expected_version: Option<i64>,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    pub reason: Option<crate::schema::Reason>,
}

/// `POST /api/v1/tenants/{tenant}/grants` with `{"id", "kind": "temporary"|"bonus",
/// "priority"?, "amount", "starts_at"?, "expires_at"?, "reason"?, "expected_version"?}` →
/// 201; 409 when the id was ever used; 422 for a grant that has already expired.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    request_body(content = GrantRequest),
    responses(
        (status = 201, description = "Added, and the tenant's quota republished", body = WriteReply),
        (status = 400, description = "A malformed tenant name or body, naming the field: kind, a priority on a temporary grant, an amount outside 1..=2^53−1, a negative `expected_version`", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version` (a `ConflictBody`), or a grant with this id exists or existed (an `ErrorBody` naming `id`): ids are never reused", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "A grant that has already expired, or that expires before it starts", body = ErrorBody),
    ),
)]
#[post("/api/v1/tenants/{tenant}/grants")]
pub async fn add_grant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<GrantBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let who = actor(&req, &state, &body.reason, false)?;
    let body = body.into_inner();
    let kind = match (body.kind.as_str(), body.priority) {
        ("temporary", None) => GrantKind::Temporary,
        ("temporary", Some(_)) => return Err(ApiError::bad_request("priority", "only bonus grants have a priority")),
        ("bonus", priority) => {
            let priority = priority.unwrap_or(0);
            if priority > i32::MAX as u32 {
                return Err(ApiError::bad_request("priority", format!("must be at most {}", i32::MAX)));
            }
            GrantKind::Bonus { priority }
        }
        (other, _) => {
            return Err(ApiError::bad_request("kind", format!("must be \"temporary\" or \"bonus\", got {other:?}")))
        }
    };
    let amount = exact_integer(&body.amount).ok_or_else(|| ApiError::bad_request("amount", "must be an integer"))?;
    let grant = NewGrant {
        id: body.id,
        kind,
        amount: Tokens::parse("amount", amount)?,
        starts_at: body.starts_at,
        expires_at: body.expires_at,
    };
    let expected_version = body.expected_version.map(expected).transpose()?;
    let written =
        store::add_grant(&state.db, &who.ctx(), &tenant, &grant, expected_version, chrono::Utc::now()).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Created().json(WriteReply::of(&[written], published)))
}

/// A revocation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The tenant's version this change was made against; left out: not checked.
    #[schema(minimum = 0)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    expected_version: Option<i64>,
}

/// `POST /api/v1/tenants/{tenant}/grants/{id}/revoke` with `{"reason",
/// "expected_version"?}`: the grant is no longer published; its row and history stay.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant"), ("id" = String, Path, description = "The grant's id: 1..=64 of `[A-Za-z0-9_-]`, not `plan`", pattern = "^(?!plan$)[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "Revoked, and the tenant's quota republished", body = WriteReply),
        (status = 400, description = "A malformed tenant name, grant id or body, a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 404, description = "Unknown tenant, or the tenant has no such grant", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version`", body = ConflictBody),
        (status = 422, description = "The grant was already revoked", body = ErrorBody),
    ),
)]
#[post("/api/v1/tenants/{tenant}/grants/{id}/revoke")]
pub async fn revoke_grant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<RevokeBody>,
) -> Result<HttpResponse, ApiError> {
    let (tenant, id) = path.into_inner();
    let tenant = tenant_id(&tenant)?;
    let id = GrantId::parse(&id)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let expected_version = body.expected_version.map(expected).transpose()?;
    let written = store::revoke_grant(&state.db, &who.ctx(), &tenant, &id, expected_version).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(WriteReply::of(&[written], published)))
}

/// `GET /api/v1/tenants/{tenant}/versions` → the tenant's versions, newest first, each with
/// its plan and settings, who made it and how.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The current version and every recorded one, newest first (`snapshot`: the plan and settings; versions published before the history was kept are not listed)", body = api::pools::PoolHistory),
        (status = 400, description = "A malformed tenant name", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
    ),
)]
#[get("/api/v1/tenants/{tenant}/versions")]
pub async fn tenant_versions(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let history = store::tenant_history(&state.db, &tenant)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("unknown tenant {:?}", tenant.as_str())))?;
    Ok(HttpResponse::Ok().json(history))
}

/// `POST /api/v1/tenants/{tenant}/restore` with `{"version", "reason", "expected_version"}`:
/// a new version of the tenant whose plan and settings equal version `version`'s (audited as
/// `tenant.restore_version`, republished); its grants stay as they are. Says which versions
/// it undid.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 200, description = "Restored and republished", body = TenantRestored),
        (status = 400, description = "A malformed tenant name or body, a version below 1, a negative `expected_version`, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown tenant, or a version its history does not hold", body = ErrorBody),
        (status = 409, description = "The tenant is at another version than `expected_version` (a `ConflictBody`), or the `tenants` approval policy applies (an `ErrorBody` naming `policy`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The version is the current one (field `version`), or names a plan that no longer exists (field `plan`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/tenants/{tenant}/restore")]
pub async fn restore_tenant(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<crate::http::RestoreBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant_id(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    if body.version < 1 {
        return Err(ApiError::bad_request("version", "must be a version (1 or more)"));
    }
    let reason = format!("restores version {}: {}", body.version, who.reason.as_deref().unwrap_or(""));
    let ctx = crate::change::Ctx { reason: Some(&reason), ..who.ctx() };
    let (written, undoes) =
        store::restore_tenant(&state.db, &ctx, &tenant, body.version, expected(body.expected_version)?).await?;
    let published = publish_now(&state).await;
    Ok(HttpResponse::Ok().json(TenantRestored {
        write: WriteReply::of(&[written], published),
        restored_from: body.version,
        undoes,
    }))
}
