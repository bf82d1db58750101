//! The routes' HTTP API: list, read, create or replace, versions and restore (admin); draw
//! and evaluate (data plane: the rules decided from the route's published snapshot, no
//! Postgres on the request path).

use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
use api::routes::{RouteDecision, RouteDetail, RouteDrawn, RouteHistory, RouteList};
use client::route::RouteName;
use engine::route::{Attributes, Loose, Route};
use serde::Deserialize;
use serde_json::Value;

use super::{store, unknown_route};
use crate::change::{Actor, Entity};
use crate::error::{ApiError, ErrorBody};
use crate::http::{actor, expected, RestoreBody};
use crate::publish::publish_now;
use crate::state::AppState;

/// Every route, for the app's service list.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(list_routes)
        .service(get_route)
        .service(put_route)
        .service(route_versions)
        .service(restore_route)
        .service(evaluate_route)
        .service(draw_route);
}

fn route_name(raw: &str) -> Result<RouteName, ApiError> {
    RouteName::parse(raw).map_err(ApiError::from)
}

/// `GET /api/v1/routes` → every route: name, version, rules, default pool, pools.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses((status = 200, description = "Every route, by name", body = RouteList)),
)]
#[get("/api/v1/routes")]
pub async fn list_routes(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(RouteList { routes: store::list_routes(&state.db).await? }))
}

/// `GET /api/v1/routes/{route}` → the route as configured (what `PUT` takes), its rules
/// in words, its version.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The route in canonical form, at its version", body = RouteDetail),
        (status = 400, description = "A malformed route name", body = ErrorBody),
        (status = 404, description = "Unknown route", body = ErrorBody),
    ),
)]
#[get("/api/v1/routes/{route}")]
pub async fn get_route(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    let (version, body, updated_at) = store::get_route(&state.db, &name).await?.ok_or_else(|| unknown_route(&name))?;
    let route = store::parse_route_body(&body)?;
    Ok(HttpResponse::Ok().json(RouteDetail {
        name: name.to_string(),
        version,
        described: route.rules().iter().map(|r| r.describe()).collect(),
        route: body,
        updated_at: crate::inputs::rfc3339(updated_at),
    }))
}

/// A whole route to install.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutRouteBody {
    /// The rules, tried in order: the first whose conditions all hold chooses the pool.
    #[schema(value_type = Vec<crate::schema::RouteRule>, max_items = 200)]
    rules: Value,
    /// The pool of requests no rule matches.
    #[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    default_pool: Value,
    /// The route's version this change was made against: 0 to create.
    #[schema(minimum = 0)]
    #[serde(deserialize_with = "crate::inputs::integer")]
    expected_version: i64,
    /// Why (1..=500 characters, no control characters), for the audit trail: required.
    #[schema(value_type = crate::schema::RequiredReason, required = true)]
    reason: Option<String>,
}

/// `PUT /api/v1/routes/{route}` with `{"rules", "default_pool", "expected_version",
/// "reason"}`: creates (expected 0) or replaces the route, audited, published at once.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "Created or replaced, and published (`published`: Redis has it already)", body = api::WriteReply),
        (status = 400, description = "A malformed route name or body (naming the field), a missing reason, or a negative `expected_version`", body = ErrorBody),
        (status = 409, description = "The route is at another version than `expected_version` (0: it exists already) (a `ConflictBody`); or the `routes` approval policy applies (an `ErrorBody` naming `policy`): propose the change with `POST /api/v1/changes`", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "A rule breaks a rule of its own (naming the field, e.g. `rules[1].when.amount.gte`: a range that holds no amount, a currency that is not three letters, a rule after one that matches every request) or names a pool that does not exist", body = ErrorBody),
    ),
)]
#[put("/api/v1/routes/{route}")]
pub async fn put_route(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<PutRouteBody>,
) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let route = parse_put(&body)?;
    let reply = put_and_publish(&state, &who, &name, &route, expected(body.expected_version)?).await?;
    Ok(HttpResponse::Ok().json(reply))
}

fn parse_put(body: &PutRouteBody) -> Result<engine::route::Route, ApiError> {
    let raw = serde_json::json!({"rules": body.rules, "default_pool": body.default_pool});
    Ok(store::parse_route_body(&raw)?)
}

/// `GET /api/v1/routes/{route}/versions` → every version of the route, newest first.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The route's versions, newest first, with who made each and how", body = RouteHistory),
        (status = 400, description = "A malformed route name", body = ErrorBody),
        (status = 404, description = "Unknown route", body = ErrorBody),
    ),
)]
#[get("/api/v1/routes/{route}/versions")]
pub async fn route_versions(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    let history = store::route_history(&state.db, &name).await?.ok_or_else(|| unknown_route(&name))?;
    Ok(HttpResponse::Ok().json(history))
}

/// `POST /api/v1/routes/{route}/restore` with `{"version", "reason", "expected_version"}`:
/// a new version equal to version N, audited as `route.restore_version`, published.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "Restored as a new version, and published", body = api::WriteReply),
        (status = 400, description = "A malformed route name or body, or a missing reason", body = ErrorBody),
        (status = 404, description = "Unknown route, or a version the history does not hold", body = ErrorBody),
        (status = 409, description = "The route is at another version than `expected_version` (a `ConflictBody`), or the `routes` approval policy applies (an `ErrorBody` naming `policy`)", body = crate::schema::ConflictOrDuplicateBody),
        (status = 422, description = "The current version, or a version naming a pool that no longer exists", body = ErrorBody),
    ),
)]
#[post("/api/v1/routes/{route}/restore")]
pub async fn restore_route(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<RestoreBody>,
) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    let who = actor(&req, &state, &body.reason, true)?;
    let reply = restore_and_publish(&state, &who, &name, body.version, expected(body.expected_version)?).await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// A request to decide: its attributes.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateBody {
    /// The request's attributes: `amount` (a decimal number, as a number or a string),
    /// `currency` (three letters), `country` (two letters), `method`, `merchant`, any other
    /// lower-case name: a string or a number each. Attributes no rule names are ignored.
    #[schema(value_type = Option<crate::schema::RouteAttributes>)]
    #[serde(default)]
    attributes: Option<Value>,
}

/// A draw through a route.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteDrawBody {
    /// The request's attributes (see `EvaluateBody`); none: the route's default decides.
    #[schema(value_type = Option<crate::schema::RouteAttributes>)]
    #[serde(default)]
    attributes: Option<Value>,
    /// Draws from the chosen pool by weighted consistent hashing of this key (1..=256
    /// bytes): the same key keeps its member while the weights stay.
    #[schema(min_length = 1, max_length = 256)]
    sticky_key: Option<String>,
}

fn attributes(raw: Option<&Value>) -> Result<Attributes, ApiError> {
    let Some(raw) = raw.filter(|v| !v.is_null()) else { return Ok(Attributes::default()) };
    let loose: Loose =
        serde_json::from_value(raw.clone()).map_err(|e| ApiError::bad_request("attributes", e.to_string()))?;
    Attributes::parse(&loose).map_err(|e| ApiError::bad_request(e.field, e.rule))
}

fn decision_reply(d: &client::route::RouteDecision) -> RouteDecision {
    RouteDecision {
        route: d.route.to_string(),
        route_version: d.route_version,
        rule: d.rule.clone(),
        rule_index: d.rule_index.map(|i| i as u32),
        pool: d.pool.clone(),
    }
}

/// Decides which rule and pool a request with these attributes gets, from the route's
/// published snapshot, without drawing: what an application (or the rule tester) asks to
/// see a route at work.
#[utoipa::path(
    tag = "admin",
    security(("admin_token" = []), ("session_cookie" = [])),
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    request_body(content = Option<EvaluateBody>, description = "Optional: no body decides with no attributes"),
    responses(
        (status = 200, description = "The rule that matched (null: none; the default pool) and the pool", body = RouteDecision),
        (status = 400, description = "A malformed route name, body or attribute (naming `attributes.<name>`)", body = ErrorBody),
        (status = 404, description = "Unknown route", body = ErrorBody),
        (status = 503, description = "Redis unreachable and the route never seen by this instance", body = ErrorBody),
    ),
)]
#[post("/api/v1/routes/{route}/evaluate")]
pub async fn evaluate_route(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    let body: EvaluateBody = crate::http::optional_body(&body)?;
    let attributes = attributes(body.attributes.as_ref())?;
    let decision = state.routes.decide(&name, &attributes).await.map_err(ApiError::from)?;
    Ok(HttpResponse::Ok().json(decision_reply(&decision)))
}

/// Draws through a route: its rules choose the pool by the request's attributes (the
/// first rule whose conditions all hold, else the default pool), then the pool's next
/// ticket is drawn. The reply names the rule that matched.
#[utoipa::path(
    tag = "route",
    params(("route" = String, Path, description = "The route: 1..=64 of `[A-Za-z0-9_-]`", pattern = "^[A-Za-z0-9_-]{1,64}$")),
    request_body(content = Option<RouteDrawBody>, description = "Optional: no body draws with no attributes"),
    responses(
        (status = 200, description = "The rule that matched, the pool, and the member drawn", body = RouteDrawn),
        (status = 400, description = "A malformed route name, body or attribute (naming `attributes.<name>`), or a `sticky_key` outside 1..=256 bytes", body = ErrorBody),
        (status = 404, description = "Unknown route", body = ErrorBody),
        (status = 503, description = "Nothing can be drawn from the chosen pool, or Redis unreachable and the route never seen by this instance", body = ErrorBody),
    ),
)]
#[post("/api/v1/routes/{route}/draw")]
pub async fn draw_route(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let name = route_name(&path)?;
    // The route is what the token is bound to; the pool its rules choose comes with it.
    crate::access::principal(&req)?.serves(crate::access::bindings::Resource::Route, name.as_str())?;
    let body: RouteDrawBody = crate::http::optional_body(&body)?;
    if body.sticky_key.as_ref().is_some_and(|k| k.is_empty() || k.len() > 256) {
        return Err(ApiError::bad_request("sticky_key", "must be 1..=256 bytes"));
    }
    let attributes = attributes(body.attributes.as_ref())?;
    let drawn = state
        .routes
        .draw(&state.pools, &name, &attributes, body.sticky_key.as_deref().map(str::as_bytes))
        .await
        .map_err(ApiError::from)?;
    let d = &drawn.decision;
    state
        .metrics
        .route_decisions
        .with_label_values(&[d.route.as_str(), d.rule.as_deref().unwrap_or("default"), d.pool.as_str()])
        .inc();
    Ok(HttpResponse::Ok().json(RouteDrawn {
        decision: decision_reply(d),
        member: drawn.draw.member,
        version: drawn.draw.version,
        source: drawn.draw.source.name().to_owned(),
        tier: drawn.draw.tier,
    }))
}

/// Creates (`expected_version` 0) or replaces a route, as one audited change, and
/// publishes it at once (the outbox delivers it otherwise). 409 where the `routes`
/// approval policy applies: the change then goes through a change request.
async fn put_and_publish(
    state: &AppState,
    who: &Actor,
    name: &RouteName,
    route: &Route,
    expected_version: i64,
) -> Result<api::WriteReply, ApiError> {
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &Entity::route_key(name)).await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, super::POLICY_SCOPE).await?;
    let written = store::put_route_tx(&mut tx, &who.ctx(), name, route, expected_version, "route.put").await?;
    tx.commit().await?;
    Ok(published(state, name, written).await)
}

/// Makes a new version of a route equal to its version `version` (a roll forward),
/// audited as `route.restore_version`; refused as `PUT` would refuse it (a pool it names
/// that no longer exists, an approval policy), for the current version (422) and for a
/// version the history does not hold (404).
async fn restore_and_publish(
    state: &AppState,
    who: &Actor,
    name: &RouteName,
    version: i64,
    expected_version: i64,
) -> Result<api::WriteReply, ApiError> {
    let mut tx = state.db.begin().await?;
    crate::change::store::lock(&mut tx, &Entity::route_key(name)).await?;
    crate::gate::policy::store::refuse_scope(&mut *tx, super::POLICY_SCOPE).await?;
    let written = super::restore_route_tx(&mut tx, &who.ctx(), name, version, expected_version).await?;
    tx.commit().await?;
    Ok(published(state, name, written).await)
}

/// Publishes what a change wrote and makes this instance's data plane see it at once.
async fn published(state: &AppState, name: &RouteName, written: crate::change::Written) -> api::WriteReply {
    let published = publish_now(state).await;
    state.routes.recheck(name);
    api::WriteReply::of(std::slice::from_ref(&written), published)
}
