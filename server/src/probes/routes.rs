//! Liveness and readiness probes, and the Prometheus scrape endpoint.

use actix_web::{get, web, HttpResponse};

use crate::state::AppState;

/// The process is alive and serving HTTP; says nothing about dependencies.
#[utoipa::path(
    tag = "probes",
    responses((status = 200, description = "Alive", body = api::Alive, example = json!({"status": "alive"}))),
)]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(api::Alive { status: "alive".into() })
}

/// Ready when Postgres and Redis both answer; otherwise 503. Public, so it says no more
/// than that: which dependency is down, their versions and errors are in
/// `/readyz/details`, for operators.
#[utoipa::path(
    tag = "probes",
    responses(
        (status = 200, description = "Postgres and Redis both answer", body = api::Ready, example = json!({"status": "ready"})),
        (status = 503, description = "A dependency is down (`/readyz/details` says which and why)", body = api::Ready, example = json!({"status": "unavailable"})),
    ),
)]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let (postgres, redis) = crate::probes::check_dependencies(&state).await;
    let body = api::Readiness::of(&postgres, &redis);
    let ready = body.down.is_empty();
    let summary = api::Ready { status: body.status };
    if ready {
        HttpResponse::Ok().json(summary)
    } else {
        HttpResponse::ServiceUnavailable().json(summary)
    }
}

/// Ready when Postgres and Redis both answer; otherwise 503, naming what is down and why
/// (operators: any role, an admin- or metrics-scope token).
#[utoipa::path(
    tag = "probes",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "Postgres and Redis both answer", body = api::Readiness, example = json!({
            "status": "ready", "down": [],
            "postgres": {"status": "up", "version": "17.2"},
            "redis": {"status": "up", "version": "7.4.1"},
        })),
        (status = 503, description = "A dependency is down; `down` names it and its `error` says why", body = api::Readiness, example = json!({
            "status": "unavailable", "down": ["redis"],
            "postgres": {"status": "up", "version": "17.2"},
            "redis": {"status": "down", "error": "redis: connection refused"},
        })),
    ),
)]
#[get("/readyz/details")]
pub async fn readyz_details(state: web::Data<AppState>) -> HttpResponse {
    let (postgres, redis) = crate::probes::check_dependencies(&state).await;
    let body = api::Readiness::of(&postgres, &redis);
    if body.down.is_empty() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Every metric in the Prometheus text format (operators and scrapers: any role, an admin-
/// or metrics-scope token).
#[utoipa::path(
    tag = "probes",
    security(("admin_token" = []), ("session_cookie" = [])),
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4")),
)]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.metrics.render())
}
