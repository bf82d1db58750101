//! `/api/v1/policies` and `/api/v1/changes`: approval policies, and change requests of pool
//! operations (submit, list, read, edit, approve, reject, apply, schedule, cancel).

use actix_web::{delete, get, post, put, web, HttpRequest, HttpResponse};
use api::changes::{ChangeList, ChangeRequest, ChangeState, Policy, PolicyList};
use chrono::{DateTime, Utc};
use client::pool::PoolName;
use serde::Deserialize;

use super::entities::Target;
use super::operation::Operation;
use super::store::{self, Proposal};
use crate::access::Role;
use crate::error::{ApiError, ConflictBody, ErrorBody};
use crate::gate::policy::store::{self as policies, PolicySpec};
use crate::http::{actor, expected};
use crate::publish::{publish_now, rebuild_if_needed};
use crate::state::AppState;

/// Every route, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_policies)
        .service(put_policy)
        .service(delete_policy)
        .service(list_changes)
        .service(submit_change)
        .service(get_change)
        .service(approve_change)
        .service(reject_change)
        .service(apply_change)
        .service(edit_change)
        .service(schedule_change)
        .service(cancel_change);
}

/// `GET /api/v1/policies` → every approval policy, by scope.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses((status = 200, description = "Every approval policy, by scope", body = PolicyList)),
)]
#[get("/api/v1/policies")]
pub async fn list_policies(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(PolicyList { policies: policies::list_policies(&state.db).await? }))
}

/// An approval policy as written.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalPolicyBody {
    /// Approvals a request needs (1..=10).
    #[schema(minimum = 1, maximum = 10)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    required_approvals: i64,
    /// The roles that may approve or reject (a role named twice counts once; self-approval
    /// is refused to everyone).
    #[schema(value_type = Vec<crate::schema::Role>, min_items = 1)]
    approver_roles: Vec<Role>,
    /// A request not applied within this many hours of its submission expires (1..=720).
    #[schema(minimum = 1, maximum = 720)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expires_after_hours: i64,
    /// Risk rule: one more approval when a change moves more than this percentage of the
    /// pool's traffic (0..=100; absent: no such rule).
    #[schema(minimum = 0, maximum = 100)]
    #[serde(default)]
    moved_percent_over: Option<f64>,
    /// Risk rule: one more approval when a change touches a member carrying more than this
    /// percentage of the traffic now (0..=100; absent: no such rule). Both rules add one.
    #[schema(minimum = 0, maximum = 100)]
    #[serde(default)]
    member_share_over: Option<f64>,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The policy's version (0: create it).
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

fn scope(raw: &str) -> Result<String, ApiError> {
    let ok = matches!(raw, "pools" | "channels" | "plans" | "tenants" | "routes")
        || matches!(crate::change::Entity::parse(raw), Ok(crate::change::Entity::Pool(_)));
    if !ok {
        return Err(ApiError::bad_request(
            "scope",
            "must be \"pools\", \"pool:<name>\" (1..=64 of [A-Za-z0-9_-]), \"channels\", \"plans\", \"tenants\" or \"routes\"",
        ));
    }
    Ok(raw.to_owned())
}

/// `PUT /api/v1/policies/{scope}` with `{"required_approvals", "approver_roles",
/// "expires_after_hours", "reason", "expected_version"}`: creates (expected 0) or replaces
/// the policy of a scope, audited. From then on the weights of the pools it covers change
/// only through change requests.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("scope" = String, Path, description = "`pools` (every pool), `pool:<name>` (one pool; it wins over `pools`), `channels`, `plans`, `tenants` or `routes`", pattern = "^(pools|channels|plans|tenants|routes|pool:[A-Za-z0-9_-]{1,64})$")),
    responses(
        (status = 200, description = "Written and audited", body = Policy),
        (status = 400, description = "A malformed scope or body (naming the field), or a missing reason", body = ErrorBody),
        (status = 409, description = "The policy is at another version than `expected_version` (0: it exists already)", body = ConflictBody),
        (status = 422, description = "A risk rule (`moved_percent_over`, `member_share_over`) on a scope that is not a pool's (`channels`, `plans`, `tenants`)", body = ErrorBody),
    ),
)]
#[put("/api/v1/policies/{scope}")]
pub async fn put_policy(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ApprovalPolicyBody>,
) -> Result<HttpResponse, ApiError> {
    let scope = scope(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    if !(1..=10).contains(&body.required_approvals) {
        return Err(ApiError::bad_request("required_approvals", "must be in 1..=10"));
    }
    if !(1..=720).contains(&body.expires_after_hours) {
        return Err(ApiError::bad_request("expires_after_hours", "must be in 1..=720"));
    }
    let mut roles: Vec<String> = Vec::new();
    for role in &body.approver_roles {
        if !roles.iter().any(|r| r == role.as_str()) {
            roles.push(role.as_str().to_owned());
        }
    }
    if roles.is_empty() {
        return Err(ApiError::bad_request("approver_roles", "must name at least one role"));
    }
    for (field, value) in
        [("moved_percent_over", body.moved_percent_over), ("member_share_over", body.member_share_over)]
    {
        if value.is_some() && matches!(scope.as_str(), "channels" | "plans" | "tenants" | "routes") {
            // A rule across the path and the body: the body alone is well-formed (422).
            return Err(ApiError::Unprocessable {
                field: field.to_owned(),
                rule: "risk rules measure a pool's traffic: pools and pool:<name> only".to_owned(),
            });
        }
        if value.is_some_and(|v| !(0.0..=100.0).contains(&v)) {
            return Err(ApiError::bad_request(field, "must be a percentage in 0..=100"));
        }
    }
    let spec = PolicySpec {
        required_approvals: body.required_approvals as i16,
        approver_roles: roles,
        expires_after_hours: body.expires_after_hours as i32,
        moved_percent_over: body.moved_percent_over,
        member_share_over: body.member_share_over,
    };
    let policy = policies::put_policy(&state.db, &who.ctx(), &scope, &spec, expected(body.expected_version)?).await?;
    Ok(HttpResponse::Ok().json(policy))
}

/// Why a policy is removed.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRemoval {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The policy's version.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `DELETE /api/v1/policies/{scope}` with `{"reason", "expected_version"}`: removes a
/// policy, audited; the pools it covered take direct writes again (or fall under `pools`).
/// Requests already open keep the terms they were submitted under.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("scope" = String, Path, description = "`pools` (every pool), `pool:<name>` (one pool; it wins over `pools`), `channels`, `plans`, `tenants` or `routes`", pattern = "^(pools|channels|plans|tenants|routes|pool:[A-Za-z0-9_-]{1,64})$")),
    responses(
        (status = 204, description = "Removed and audited"),
        (status = 400, description = "A malformed scope or body (naming the field), or a missing reason", body = ErrorBody),
        (status = 404, description = "No policy for that scope", body = ErrorBody),
        (status = 409, description = "The policy is at another version than `expected_version`", body = ConflictBody),
    ),
)]
#[delete("/api/v1/policies/{scope}")]
pub async fn delete_policy(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PolicyRemoval>,
) -> Result<HttpResponse, ApiError> {
    let scope = scope(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    policies::delete_policy(&state.db, &who.ctx(), &scope, expected(body.expected_version)?).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The filters of the list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChangeQuery {
    /// Only requests in this state.
    #[param(pattern = "^(in_review|approved|scheduled|rejected|applied|suspended|cancelled|expired)$")]
    state: Option<String>,
    /// Only requests about this pool.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pool: Option<String>,
    /// Only requests about this entity (`pool:<name>`, `channel:<code>`, `plan:<name>` or
    /// `tenant:<name>`; not with `pool`).
    #[param(
        pattern = "^(pool:[A-Za-z0-9_-]{1,64}|channel:[A-Za-z0-9_.-]{1,64}|plan:[A-Za-z0-9_-]{1,64}|tenant:[A-Za-z0-9_-]{1,64})$"
    )]
    entity: Option<String>,
    /// Only requests proposed by this person (a user name).
    #[param(pattern = "^[A-Za-z0-9_.@-]{1,64}$")]
    author: Option<String>,
}

/// `GET /api/v1/changes?state=&pool=&entity=&author=` → change requests, newest first (at most 200).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(ChangeQuery),
    responses(
        (status = 200, description = "Change requests, newest first (at most 200)", body = ChangeList),
        (status = 400, description = "A malformed or unknown parameter, naming it", body = ErrorBody),
    ),
)]
#[get("/api/v1/changes")]
pub async fn list_changes(
    state: web::Data<AppState>,
    query: web::Query<ChangeQuery>,
) -> Result<HttpResponse, ApiError> {
    if let Some(s) = &query.state {
        if ChangeState::parse(s).is_none() {
            let names = ChangeState::names(&ChangeState::ALL).join(", ");
            return Err(ApiError::bad_request("state", format!("must be one of {names}")));
        }
    }
    let entity = match (&query.pool, &query.entity) {
        (Some(p), None) => Some(crate::change::Entity::pool_key(PoolName::parse(p)?)),
        (None, Some(e)) => Some(Target::parse(e)?.key()),
        (None, None) => None,
        (Some(_), Some(_)) => return Err(ApiError::bad_request("entity", "give `pool` or `entity`, not both")),
    };
    if let Some(author) = &query.author {
        api::UserName::parse(author).map_err(|e| ApiError::bad_request("author", e.rule))?;
    }
    let changes = super::list::store::list_requests(
        &state.db,
        query.state.as_deref(),
        entity.as_deref(),
        query.author.as_deref(),
    )
    .await?;
    Ok(HttpResponse::Ok().json(ChangeList { changes }))
}

/// A proposed change of a pool: the pool and one operation with the body of its direct
/// write.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeBody {
    /// The pool (for an operation on a pool; or give `entity`).
    #[schema(value_type = Option<String>, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    #[serde(default)]
    pool: Option<String>,
    /// What the operation changes: `pool:<name>`, `channel:<code>`, `plan:<name>` or
    /// `tenant:<name>` (or give `pool`).
    #[schema(value_type = Option<String>, pattern = "^(pool:[A-Za-z0-9_-]{1,64}|channel:[A-Za-z0-9_.-]{1,64}|plan:[A-Za-z0-9_-]{1,64}|tenant:[A-Za-z0-9_-]{1,64})$")]
    #[serde(default)]
    entity: Option<String>,
    /// What to do, as the direct write takes it, tagged by `kind`: `pool.weights`,
    /// `pool.member_add`, `pool.peak_windows`, `pool.caps`, `pool.restore_version`,
    /// `channel.create`, `channel.update`, `plan.create`, `plan.update`,
    /// `plan.restore_version`, `tenant.put` or `tenant.restore_version`.
    operation: Operation,
    /// Why (1..=500 characters, no control characters): what reviewers read, and the reason
    /// of the change once applied. Required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version the change is made against.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `POST /api/v1/changes` with `{"pool" | "entity", "operation", "reason", "expected_version"}`:
/// submits a change request of an operation on a pool, channel, plan or tenant for review (state `in_review`), with the
/// diff reviewers see and the content hash their approvals name. It needs the approvals of
/// the policy that applies to the pool (one by a pm or an admin where none does).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Submitted for review", body = ChangeRequest),
        (status = 400, description = "A malformed body (naming the field) or a missing reason", body = ErrorBody),
        (status = 403, description = "Not a person signed in (an API token or the configured admin token proposes nothing), or not allowed to edit", body = ErrorBody),
        (status = 409, description = "The pool is at another configuration version than `expected_version`", body = ConflictBody),
        (status = 404, description = "Unknown pool, or (a restore) a version its history does not hold", body = ErrorBody),
        (status = 422, description = "An operation the pool cannot take (an unregistered channel, a tier without channels, a restore naming a disabled channel, …), naming the field", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes")]
pub async fn submit_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Json<ChangeBody>,
) -> Result<HttpResponse, ApiError> {
    let who = actor(&req, &state, &body.reason, true)?;
    super::person_role(&crate::access::principal(&req)?, "proposing a change")?;
    let body = body.into_inner();
    let target = match (&body.pool, &body.entity) {
        (Some(pool), None) => Target::Pool(PoolName::parse(pool)?),
        (None, Some(entity)) => Target::parse(entity)?,
        _ => return Err(ApiError::bad_request("entity", "give either `pool` or `entity`, not both or neither")),
    };
    let proposal = Proposal { operation: body.operation, expected_version: expected(body.expected_version)? };
    let request = store::submit(&state.db, &who.ctx(), &target, &proposal).await?;
    Ok(HttpResponse::Created().json(request))
}

fn request_id(raw: &str) -> Result<i64, ApiError> {
    crate::http::path_id(raw, "a change request")
}

/// `GET /api/v1/changes/{id}` → one change request with its reviews.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "The request", body = ChangeRequest),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
    ),
)]
#[get("/api/v1/changes/{id}")]
pub async fn get_change(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let id = request_id(&path)?;
    let request = store::get_request(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no change request {id}")))?;
    Ok(HttpResponse::Ok().json(request))
}

/// An approval: the content hash the reviewer read, and what they say.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// The request's `content_hash` as the reviewer read it: a review of anything else is
    /// refused.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    content_hash: String,
    /// What the reviewer says (at most 500 characters, no control characters).
    #[schema(value_type = Option<crate::schema::Reason>)]
    comment: Option<String>,
}

/// A rejection: the content hash the reviewer read, and why.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    /// The request's `content_hash` as the reviewer read it.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    content_hash: String,
    /// Why (1..=500 characters, not blank, no control characters): required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    comment: Option<String>,
}

async fn review(
    req: HttpRequest,
    state: &AppState,
    id: &str,
    (content_hash, comment): (&str, &Option<String>),
    approve: bool,
) -> Result<ChangeRequest, ApiError> {
    let id = request_id(id)?;
    let principal = crate::access::principal(&req)?;
    let role = super::person_role(&principal, "reviewing a change")?;
    let who = actor(&req, state, comment, !approve).map_err(|e| match e {
        ApiError::BadRequest { rule, .. } => ApiError::bad_request("comment", rule),
        other => other,
    })?;
    if content_hash.len() != 64 || !content_hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ApiError::bad_request("content_hash", "must be 64 lowercase hexadecimal digits"));
    }
    store::review_request(&state.db, &who.ctx(), id, &role, approve, content_hash, who.reason.as_deref()).await
}

/// `POST /api/v1/changes/{id}/approve` with `{"content_hash", "comment"?}`.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Approved for this content hash (`approved` once it has enough approvals)", body = ChangeRequest),
        (status = 400, description = "A malformed id or body, naming the field", body = ErrorBody),
        (status = 403, description = "The caller proposed the request (nobody approves their own), acts in a role the request's policy (or the pool's policy now) does not name, or is not a person signed in (API tokens and the configured admin token do not review)", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
        (status = 409, description = "The request is not in review (or expired: it is now `expired`), its content hash is another, or the caller reviewed it already; naming the field", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes/{id}/approve")]
pub async fn approve_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ApproveBody>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(review(req, &state, &path, (&body.content_hash, &body.comment), true).await?))
}

/// `POST /api/v1/changes/{id}/reject` with `{"content_hash", "comment"}`: one rejection
/// ends the request (`rejected`).
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Rejected", body = ChangeRequest),
        (status = 400, description = "A malformed id or body, or a missing comment, naming the field", body = ErrorBody),
        (status = 403, description = "The caller proposed the request, acts in a role the request's policy (or the pool's policy now) does not name, or is not a person signed in", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
        (status = 409, description = "The request is neither in review nor approved (or expired), its content hash is another, or the caller reviewed it already; naming the field", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes/{id}/reject")]
pub async fn reject_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<RejectBody>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(review(req, &state, &path, (&body.content_hash, &body.comment), false).await?))
}

/// `POST /api/v1/changes/{id}/apply`: applies an approved request (the pool's weights
/// change as the direct write would change them, audited as `pool.weights` with the
/// request named in the reason, and published), or suspends it when the pool changed
/// since the version it was made against.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Applied: `outcome` has the pool's new configuration and published versions", body = ChangeRequest),
        (status = 400, description = "A malformed id", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
        (status = 409, description = "Not approved, or the pool's policy now asks more approvals than it has (it is back in review) (an `ErrorBody` naming `state`; an expired request is now `expired`), or the pool changed since the request's version (a `ConflictBody`; the request is now `suspended`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The pool cannot take the weights any more (a channel left the registry), naming the field", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes/{id}/apply")]
pub async fn apply_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = request_id(&path)?;
    let who = actor(&req, &state, &None, false)?;
    let (request, written) = store::apply_request(&state, &who.ctx(), id, None).await?;
    let published = publish_now(&state).await;
    // This instance decides with the new rules at once (others within a second).
    if let Ok(super::entities::Target::Route(route)) = super::entities::Target::parse(&request.entity) {
        state.routes.recheck(&route);
    }
    if let Some((pool, written, mode)) = written {
        if published {
            rebuild_if_needed(&state, &pool, &written.published, mode).await;
        }
    }
    Ok(HttpResponse::Ok().json(request))
}

/// Why a request is cancelled.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `POST /api/v1/changes/{id}/cancel` with `{"reason"}`: its author or an admin cancels an
/// open or suspended request.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Cancelled", body = ChangeRequest),
        (status = 400, description = "A malformed id or body, or a missing reason", body = ErrorBody),
        (status = 403, description = "Neither its author nor an admin signed in", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
        (status = 409, description = "Already applied, rejected, cancelled or expired (naming `state`)", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes/{id}/cancel")]
pub async fn cancel_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<CancelBody>,
) -> Result<HttpResponse, ApiError> {
    let id = request_id(&path)?;
    let principal = crate::access::principal(&req)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let role = super::person_role(&principal, "cancelling a change")?;
    let request = store::cancel_request(&state.db, &who.ctx(), id, &role).await?;
    Ok(HttpResponse::Ok().json(request))
}

/// A new proposal for a request: the body of `POST /api/v1/changes` without the pool.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    /// What to do instead, as `POST /api/v1/changes` takes it.
    operation: Operation,
    /// Why (1..=500 characters, no control characters): required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
    /// The pool's configuration version the new proposal is made against.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
}

/// `PUT /api/v1/changes/{id}` with `{"operation", "reason", "expected_version"}`: its
/// author replaces the proposal of a request in review, approved, scheduled or suspended.
/// The content hash changes, so every approval given before no longer counts: the request
/// is in review again.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Replaced: in review again, with a new content hash", body = ChangeRequest),
        (status = 400, description = "A malformed id or body (naming the field), or a missing reason", body = ErrorBody),
        (status = 403, description = "Not the request's author, or not a person signed in", body = ErrorBody),
        (status = 404, description = "No such request, or its pool is gone", body = ErrorBody),
        (status = 409, description = "The request is applied, rejected, cancelled or expired (an `ErrorBody` naming `state`), or the pool is at another configuration version than `expected_version` (a `ConflictBody`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "An operation the pool cannot take, naming the field", body = ErrorBody),
    ),
)]
#[put("/api/v1/changes/{id}")]
pub async fn edit_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<EditBody>,
) -> Result<HttpResponse, ApiError> {
    let id = request_id(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    super::person_role(&crate::access::principal(&req)?, "editing a change")?;
    let body = body.into_inner();
    let proposal = Proposal { operation: body.operation, expected_version: expected(body.expected_version)? };
    Ok(HttpResponse::Ok().json(store::edit_request(&state.db, &who.ctx(), id, &proposal).await?))
}

/// When to apply an approved request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleBody {
    /// RFC 3339, in the future and before the request expires.
    #[schema(value_type = String, format = DateTime)]
    at: DateTime<Utc>,
}

/// `POST /api/v1/changes/{id}/schedule` with `{"at"}`: the change_apply job (leader, every
/// 10 s) applies the approved request at that time; a pool that changed in between
/// suspends it then, saying why.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("id" = String, Path, description = "The request's number", pattern = "^[1-9][0-9]{0,17}$")),
    responses(
        (status = 200, description = "Scheduled", body = ChangeRequest),
        (status = 400, description = "A malformed id or body, naming the field", body = ErrorBody),
        (status = 404, description = "No such request", body = ErrorBody),
        (status = 409, description = "Not approved (naming `state`; an expired request is now `expired`)", body = ErrorBody),
        (status = 422, description = "`at` is not in the future, or not before the request expires", body = ErrorBody),
    ),
)]
#[post("/api/v1/changes/{id}/schedule")]
pub async fn schedule_change(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ScheduleBody>,
) -> Result<HttpResponse, ApiError> {
    let id = request_id(&path)?;
    let who = actor(&req, &state, &None, false)?;
    Ok(HttpResponse::Ok().json(super::schedule::store::schedule_request(&state.db, &who.ctx(), id, body.at).await?))
}
