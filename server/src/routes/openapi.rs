//! The OpenAPI 3 document of the HTTP API, as JSON.

use std::sync::LazyLock;

use actix_web::{get, HttpResponse};

/// The document, rendered once: it is fixed at compile time.
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| crate::openapi::document().to_json().expect("the OpenAPI document serialises to JSON"));

/// The OpenAPI 3.1 document of every endpoint, generated from the handlers' annotations.
#[utoipa::path(
    tag = "meta",
    responses((status = 200, description = "This document (OpenAPI 3.1, JSON)", body = Object)),
)]
#[get("/api/v1/openapi.json")]
pub async fn get_openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(DOCUMENT.as_str())
}
