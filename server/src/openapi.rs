//! The OpenAPI 3 document of the HTTP API ([`ApiDoc`]), served at `GET /api/v1/openapi.json`.
//!
//! Each handler carries `#[utoipa::path(...)]` *above* its actix route attribute (utoipa
//! reads the method and the path from `#[get("...")]`, the path parameters from
//! `web::Path`, the request body from `web::Json<T>`), and is listed in [`ApiDoc`]'s
//! `paths(...)` below. `tests/tests/api/openapi.rs` fails for every route the server serves
//! that the document lacks, and for every documented path that no route serves. Handlers
//! list only their own answers: [`GuardAnswers`] adds the guard's 401, 403 and 503 to each
//! operation from the permission table, [`BodyAnswers`] the 400 and 413 of a request body,
//! [`ServerErrors`] the 500.
//!
//! Schemas: request bodies derive `utoipa::ToSchema` where they are defined; the `api` and
//! `client` types derive it behind their `utoipa` feature; `engine` stays free of utoipa
//! (it compiles to wasm), so its types are described by hand in [`crate::schema`] or as
//! `#[schema(value_type = Object)]`.

use std::sync::LazyLock;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi};

use actix_web::{get, HttpResponse};

use client::pool::PoolName;
use client::quota::TenantId;

use crate::error::{ConflictBody, ErrorBody, QuotaRefusedBody};
use crate::schema::*;

/// The name of the admin bearer-token security scheme: admin handlers declare
/// `security(("admin_token" = []), ("session_cookie" = []))` (either one).
pub const ADMIN_TOKEN: &str = "admin_token";
/// The name of the login-session security scheme (the cookie `POST /api/v1/auth/login` sets).
pub const SESSION_COOKIE: &str = "session_cookie";

/// The whole HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tessera",
        description = "Weighted traffic allocation and tenant quota reservation: the data plane \
            (draw a channel; reserve, settle, release tokens), the admin API and the audit trail. \
            Errors answer `{\"error\": ...}`, with `field` and `rule` for a 400 or a 422.",
    ),
    paths(
        // Probes and this document.
        crate::probes::routes::healthz,
        crate::probes::routes::readyz,
        crate::probes::routes::readyz_details,
        crate::probes::routes::metrics,
        get_openapi,
        get_reference,
        // Quota data plane.
        crate::quota::routes::reserve_quota,
        crate::quota::routes::settle_quota,
        crate::quota::routes::release_quota,
        crate::quota::routes::get_quota,
        // Pool data plane.
        crate::pools::draw::draw_ticket,
        crate::routing::routes::draw_route,
        crate::samples::routes::list_pool_samples,
        // Traffic replay: recorded draws through a candidate configuration (draws/routes.rs).
        crate::draws::routes::replay_pool,
        // Outcome reports (data plane of health).
        crate::channels::outcomes::record_outcomes,
        // Audit trail.
        crate::audit::routes::list,
        crate::audit::routes::verify,
        crate::audit::routes::export,
        // ==== ADMIN: every admin handler goes here (each resource's routes.rs) ====
        // Annotate it `#[utoipa::path(tag = "admin", security(("admin_token" = []), ("session_cookie" = [])), ...)]`
        // above its `#[get/post/put/delete(...)]`, then list it, e.g. `crate::pools::routes::get_pool,`.
        // Pools (pools/routes.rs; versions and restore: pools/history/routes.rs).
        crate::pools::routes::list_pools,
        crate::pools::routes::get_pool,
        crate::pools::routes::put_pool,
        crate::pools::routes::update_pool_weights,
        crate::pools::routes::add_member,
        crate::pools::routes::eject_member,
        crate::pools::routes::restore_member,
        crate::pools::routes::put_peak_windows,
        crate::pools::routes::put_caps,
        crate::pools::routes::put_window_caps,
        crate::pools::routes::rebuild_pool,
        crate::pools::history::routes::pool_versions,
        crate::pools::history::routes::restore_pool,
        // Approval policies and change requests.
        crate::approvals::routes::list_policies,
        crate::approvals::routes::put_policy,
        crate::approvals::routes::delete_policy,
        crate::approvals::routes::list_changes,
        crate::approvals::routes::submit_change,
        crate::approvals::routes::get_change,
        crate::approvals::routes::approve_change,
        crate::approvals::routes::reject_change,
        crate::approvals::routes::apply_change,
        crate::approvals::routes::edit_change,
        crate::approvals::routes::schedule_change,
        crate::approvals::routes::cancel_change,
        crate::gate::break_glass::routes::list_break_glass,
        crate::gate::break_glass::routes::acknowledge_break_glass,
        // Channels, plans, tenants and grants (channels/, plans/, tenants/ routes.rs).
        crate::channels::routes::list_channels,
        crate::channels::routes::get_channel,
        crate::channels::routes::create_channel,
        crate::channels::routes::update_channel,
        crate::channels::routes::disable_channel,
        crate::channels::routes::enable_channel,
        crate::plans::routes::list_plans,
        crate::plans::routes::get_plan,
        crate::plans::routes::create_plan,
        crate::plans::routes::update_plan,
        crate::plans::routes::plan_versions,
        crate::plans::routes::restore_plan,
        crate::tenants::routes::list_tenants,
        crate::tenants::routes::get_tenant,
        crate::tenants::routes::put_tenant,
        crate::tenants::routes::add_grant,
        crate::tenants::routes::revoke_grant,
        crate::tenants::routes::tenant_versions,
        crate::tenants::routes::restore_tenant,
        crate::usage::routes::usage,
        crate::usage::routes::usage_csv,
        crate::usage::dead_letters::routes::list_dead_letters,
        // Routes.
        crate::routing::routes::list_routes,
        crate::routing::routes::get_route,
        crate::routing::routes::put_route,
        crate::routing::routes::route_versions,
        crate::routing::routes::restore_route,
        crate::routing::routes::evaluate_route,
        // Ramps.
        crate::ramps::routes::start_ramp,
        crate::ramps::routes::pool_ramps,
        crate::ramps::routes::list_ramps,
        crate::ramps::routes::get_ramp,
        crate::ramps::routes::promote,
        crate::ramps::routes::promote_to_end,
        crate::ramps::routes::pause,
        crate::ramps::routes::resume,
        crate::ramps::routes::step_back,
        crate::ramps::routes::abort,
        // Health state, pins and policies (health/routes.rs).
        crate::health::routes::pool_health,
        crate::health::routes::channel_health,
        crate::health::routes::history,
        crate::health::routes::pin,
        crate::health::routes::unpin,
        crate::health::routes::put_policy,
        // Adaptive tiers: a tiers pool's tier policy and the moves it finds (tiers/routes.rs).
        crate::tiers::routes::get_tier_policy,
        crate::tiers::routes::put_tier_policy,
        crate::tiers::routes::accept_tier_move,
        crate::tiers::routes::dismiss_tier_move,
        // Sign-in, users, API tokens and accounts (access/routes.rs, access/account.rs).
        crate::access::routes::login,
        crate::access::routes::logout,
        crate::access::routes::me,
        crate::access::routes::list_users,
        crate::access::routes::add_user,
        crate::access::routes::set_role,
        crate::access::routes::disable_user,
        crate::access::routes::unlock_user,
        crate::access::routes::list_tokens,
        crate::access::routes::add_token,
        crate::access::routes::revoke_token,
        crate::access::routes::bind_token,
        crate::access::account::change_password,
        crate::access::account::logout_everywhere,
        crate::access::account::reset_password,
        // ==== end of ADMIN ====
    ),
    // Schemas that only path parameters name (utoipa collects those of bodies on its own), and
    // those the admin handlers share.
    components(schemas(
        TenantId, PoolName, ErrorBody, QuotaRefusedBody, ConflictBody, ConflictOrDuplicateBody, crate::schema::RefusedOrThrottledBody, WeightEntry,
        PeakWindowEntry, Tier, ReweightMode, Pin, GrantKind, Role, TokenScope, TenantSettings,
    )),
    modifiers(&AdminToken, &SessionCookie, &GuardAnswers, &BodyAnswers, &ServerErrors, &ClosedOperations),
    tags(
        (name = "quota", description = "Two-phase token quota: reserve an estimate, settle the real use or release; idempotent by request id"),
        (name = "pool", description = "Weighted ticket pools: draw the channel for a request; samples for charts"),
        (name = "route", description = "Routes: rules on a request's attributes choose the pool it draws from"),
        (name = "health", description = "Outcome reports per channel, which decay, eject and recover channels; health state, pins and policies"),
        (name = "admin", description = "Pools, channels, plans, tenants and their changes; every write is audited (bearer token or login session)"),
        (name = "ramps", description = "Staged gray releases of a pool's weights, guarded by the channels' outcomes: plans, timelines, controls"),
        (name = "auth", description = "Sign-in and sign-out, who am I; users and API tokens (admins)"),
        (name = "audit", description = "The append-only, hash-chained audit log"),
        (name = "probes", description = "Liveness, readiness, Prometheus metrics"),
        (name = "meta", description = "This document"),
    )
)]
pub struct ApiDoc;

/// The document as served.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// Declares the admin bearer token (`Authorization: Bearer <admin.token>`).
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "The configured admin token (admin.token, TESSERA_ADMIN_TOKEN), or an API token \
             (POST /api/v1/tokens) whose scope allows the route"
                .to_owned(),
        );
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(ADMIN_TOKEN, SecurityScheme::Http(scheme));
    }
}

/// Declares the login session: the cookie `POST /api/v1/auth/login` sets.
struct SessionCookie;

impl Modify for SessionCookie {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = ApiKey::Cookie(ApiKeyValue::with_description(
            crate::access::SESSION_COOKIE,
            "The session cookie POST /api/v1/auth/login sets; what it may do follows the user's role. \
             Unsafe requests (POST, PUT, …) made with it must come from this site (Origin or Referer) \
             and repeat the session's CSRF token in X-CSRF-Token",
        ));
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(SESSION_COOKIE, SecurityScheme::ApiKey(scheme));
    }
}

/// Adds to each operation the answers of the guard in front of it, from the permission
/// table ([`crate::access::requirement`]), so no handler repeats them: 401 without valid
/// credentials, 403 naming who holds the permission (and, for writes, the session's
/// same-origin and CSRF rules), and 503 when Postgres, which verifies credentials, is
/// unreachable. A handler that documents one of these itself keeps its own.
struct GuardAnswers;

impl Modify for GuardAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use actix_web::http::Method;
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                (Method::GET, &mut item.get),
                (Method::PUT, &mut item.put),
                (Method::POST, &mut item.post),
                (Method::DELETE, &mut item.delete),
                (Method::PATCH, &mut item.patch),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                let Some(needed) = crate::access::requirement(&method, path) else { continue };
                let unsafe_method = method != Method::GET;
                let mut forbidden = format!("Not allowed: needs {} (permission {needed})", needed.holders());
                if unsafe_method && needed != crate::access::Permission::DataPlane {
                    forbidden.push_str("; or a session write from another origin or without its X-CSRF-Token");
                }
                let answers = [
                    ("401", "No credentials, an unknown or revoked token, or an expired session".to_owned()),
                    ("403", forbidden),
                    ("503", "Postgres is unreachable".to_owned()),
                    (
                        "429",
                        "Too many unknown or revoked API tokens from this address just now (`Retry-After` says when to \
                         try again)"
                            .to_owned(),
                    ),
                ];
                let responses = &mut operation.responses.responses;
                for (status, description) in answers {
                    if (status == "403" && needed == crate::access::Permission::Any) || responses.contains_key(status) {
                        continue;
                    }
                    responses.insert(status.to_owned(), RefOr::T(error_response(&description)));
                }
            }
        }
    }
}

/// Adds to each operation that takes a request body the answers of the body's extractor
/// (`crate::error::json_error`), so no handler repeats them: 400 for a body that is not JSON
/// or is sent with another `Content-Type`, 413 for a body over the size limit. A handler
/// that documents one of these itself keeps its own.
struct BodyAnswers;

impl Modify for BodyAnswers {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.put, &mut item.post, &mut item.patch, &mut item.delete];
            for operation in operations.into_iter().flatten() {
                if operation.request_body.is_none() {
                    continue;
                }
                let answers = [
                    ("400", "A malformed body, or one sent without `Content-Type: application/json`"),
                    ("413", "The body is over the size limit"),
                ];
                let responses = &mut operation.responses.responses;
                for (status, description) in answers {
                    if !responses.contains_key(status) {
                        responses.insert(status.to_owned(), RefOr::T(error_response(description)));
                    }
                }
            }
        }
    }
}

/// Each kind of a change request's operation takes only its own fields, as the direct write
/// does (`#[serde(deny_unknown_fields)]` on the tagged enum): utoipa leaves the variants
/// open, so they are closed here.
struct ClosedOperations;

impl Modify for ClosedOperations {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{AdditionalProperties, Schema};
        let Some(RefOr::T(Schema::OneOf(kinds))) =
            openapi.components.as_mut().and_then(|c| c.schemas.get_mut("Operation"))
        else {
            return;
        };
        for kind in &mut kinds.items {
            if let RefOr::T(Schema::Object(object)) = kind {
                object.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
            }
        }
    }
}

/// An answer with an [`ErrorBody`].
fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
        .build()
}

/// Adds the 500 that every handler answering `ApiError` may give (an unexpected error, with
/// no internals in its body) to each operation that documents an [`ErrorBody`] answer.
struct ServerErrors;

impl Modify for ServerErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                let responses = &mut operation.responses.responses;
                let answers_api_errors = serde_json::to_string(&*responses)
                    .is_ok_and(|json| json.contains("\"#/components/schemas/ErrorBody\""));
                if answers_api_errors && !responses.contains_key("500") {
                    let response = ResponseBuilder::new()
                        .description("An unexpected error; the server log has the details")
                        .content(
                            "application/json",
                            ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                        )
                        .build();
                    responses.insert("500".to_owned(), RefOr::T(response));
                }
            }
        }
    }
}

/// The document, rendered once: it is fixed at compile time.
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| document().to_json().expect("the OpenAPI document serialises to JSON"));

/// The OpenAPI 3.1 document of every endpoint, generated from the handlers' annotations.
#[utoipa::path(
    tag = "meta",
    responses((status = 200, description = "This document (OpenAPI 3.1, JSON)", body = Object)),
)]
#[get("/api/v1/openapi.json")]
pub async fn get_openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(DOCUMENT.as_str())
}

/// The reference page, rendered once from the document.
static REFERENCE: LazyLock<String> =
    LazyLock::new(|| crate::reference::render(&serde_json::from_str(&DOCUMENT).expect("the OpenAPI document is JSON")));

/// What the reference page may load: the site's stylesheet, nothing else (it has no script).
const REFERENCE_POLICY: &str =
    "default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The API reference: this document as one HTML page (every operation with its parameters,
/// its request body's fields and an example, its answers; every schema).
#[utoipa::path(
    tag = "meta",
    responses((status = 200, description = "The API reference (HTML)", content_type = "text/html", body = String)),
)]
#[get("/api/v1/reference")]
pub async fn get_reference() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((actix_web::http::header::CONTENT_SECURITY_POLICY, REFERENCE_POLICY))
        .body(REFERENCE.as_str())
}
