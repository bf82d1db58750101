//! Liveness and readiness probes, and the Prometheus scrape endpoint.

use actix_web::{get, web, HttpResponse};
use serde_json::json;

use crate::state::AppState;

/// The process is alive and serving HTTP; says nothing about dependencies.
#[utoipa::path(
    tag = "probes",
    responses((status = 200, description = "Alive", body = Object, example = json!({"status": "alive"}))),
)]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "alive" }))
}

/// Ready when Postgres and Redis both answer; otherwise 503, naming what is down and why.
#[utoipa::path(
    tag = "probes",
    responses(
        (status = 200, description = "Postgres and Redis both answer", body = Object, example = json!({
            "status": "ready", "down": [],
            "postgres": {"status": "up", "version": "17.2"},
            "redis": {"status": "up", "version": "7.4.1"},
        })),
        (status = 503, description = "A dependency is down; `down` names it and its `error` says why", body = Object, example = json!({
            "status": "unavailable", "down": ["redis"],
            "postgres": {"status": "up", "version": "17.2"},
            "redis": {"status": "down", "error": "redis: connection refused"},
        })),
    ),
)]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let (postgres, redis) = crate::probes::check_dependencies(&state).await;
    let describe = |dep: &app::api::DependencyStatus| {
        if dep.up {
            json!({ "status": "up", "version": dep.version })
        } else {
            json!({ "status": "down", "error": dep.error })
        }
    };
    let down: Vec<&str> = [("postgres", &postgres), ("redis", &redis)]
        .into_iter()
        .filter(|(_, dep)| !dep.up)
        .map(|(name, _)| name)
        .collect();
    let body = json!({
        "status": if down.is_empty() { "ready" } else { "unavailable" },
        "down": down,
        "postgres": describe(&postgres),
        "redis": describe(&redis),
    });
    if down.is_empty() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Every metric in the Prometheus text format.
#[utoipa::path(
    tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4")),
)]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.metrics.render())
}
