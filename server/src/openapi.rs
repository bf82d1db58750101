//! The OpenAPI 3 document of the HTTP API ([`ApiDoc`]), served at `GET /api/v1/openapi.json`.
//!
//! Each handler carries `#[utoipa::path(...)]` *above* its actix route attribute (utoipa
//! reads the method and the path from `#[get("...")]`, the path parameters from
//! `web::Path`, the request body from `web::Json<T>`), and is listed in [`ApiDoc`]'s
//! `paths(...)` below. `tests/tests/openapi.rs` fails for every route in
//! `server/src/routes/` that the document lacks, and for every documented path that no
//! route serves.
//!
//! Schemas: request bodies defined here derive `utoipa::ToSchema`; the `client` types the
//! API answers with derive it behind `client`'s `utoipa` feature; `engine` stays free of
//! utoipa (it compiles to wasm), so its types are described by hand ([`WeightEntry`]) or as
//! `#[schema(value_type = Object)]`.

use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};
use utoipa::{Modify, OpenApi};

use client::pool::PoolName;
use client::quota::TenantId;

use crate::error::{ConflictBody, ErrorBody, QuotaRefusedBody};
use crate::routes;

/// The name of the admin bearer-token security scheme: admin handlers declare
/// `security(("admin_token" = []))`.
pub const ADMIN_TOKEN: &str = "admin_token";

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
        routes::health::healthz,
        routes::health::readyz,
        routes::metrics::metrics,
        routes::openapi::get_openapi,
        // Quota data plane.
        routes::quota::reserve_quota,
        routes::quota::settle_quota,
        routes::quota::release_quota,
        routes::quota::get_quota,
        // Pool data plane.
        routes::pool::draw_ticket,
        routes::samples::list_pool_samples,
        // Outcome reports (data plane of health).
        routes::outcomes::record_outcomes,
        // Audit trail.
        routes::audit::list,
        routes::audit::verify,
        routes::audit::export,
        // ==== ADMIN: every admin handler goes here (routes/admin.rs and any new admin files) ====
        // Annotate it `#[utoipa::path(tag = "admin", security(("admin_token" = [])), ...)]` above
        // its `#[get/post/put/delete(...)]`, then list it, e.g. `routes::admin::get_pool,`.
        // ==== end of ADMIN ====
    ),
    // Schemas that only path parameters name (utoipa collects those of bodies on its own), and
    // those the admin handlers share.
    components(schemas(TenantId, PoolName, ErrorBody, QuotaRefusedBody, ConflictBody, WeightEntry)),
    modifiers(&AdminToken, &ServerErrors),
    tags(
        (name = "quota", description = "Two-phase token quota: reserve an estimate, settle the real use or release; idempotent by request id"),
        (name = "pool", description = "Weighted ticket pools: draw the channel for a request; samples for charts"),
        (name = "health", description = "Outcome reports per channel, which decay, eject and recover channels"),
        (name = "admin", description = "Pools, tenants and their changes; every write is audited (bearer token)"),
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

/// One member of a pool's weights as the admin API takes and gives them:
/// `[{"member": "A", "weight": 45}, …]`, members unique and non-empty, at least one weight
/// positive, the total at most 2^53 − 1. Describes `engine::Weights` (which stays free of
/// utoipa): `#[schema(value_type = Vec<crate::openapi::WeightEntry>)]`.
#[derive(utoipa::ToSchema)]
pub struct WeightEntry {
    /// The member (a channel code, or a tier `G`/`N`/`U` in a `tiers` pool).
    pub member: String,
    /// Its integer weight, ≥ 0 (0: never drawn).
    pub weight: u64,
}

/// Declares the admin bearer token (`Authorization: Bearer <admin.token>`).
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some("The configured admin token (admin.token, TESSERA_ADMIN_TOKEN)".to_owned());
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(ADMIN_TOKEN, SecurityScheme::Http(scheme));
    }
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
