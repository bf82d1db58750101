//! Prometheus scrape endpoint and the middleware that records HTTP metrics.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{get, web, HttpResponse};

use crate::metrics::Metrics;
use crate::state::AppState;

/// Every metric in the Prometheus text format.
#[utoipa::path(
    tag = "probes",
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain; version=0.0.4")),
)]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(state.metrics.render())
}

/// Counts and times every request by its matched route pattern (not the raw path, which
/// would give one series per pool name or id).
pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let recorder: Option<Metrics> = req.app_data::<web::Data<AppState>>().map(|s| s.metrics.clone());
    let method = req.method().to_string();
    let route = req.match_pattern().unwrap_or_else(|| "unmatched".to_owned());
    let response = next.call(req).await;
    let status = match &response {
        Ok(res) => res.status().as_u16().to_string(),
        Err(e) => e.as_response_error().status_code().as_u16().to_string(),
    };
    if let Some(recorder) = recorder {
        recorder.http_requests.with_label_values(&[&method, &route, &status]).inc();
        recorder.http_duration.with_label_values(&[&method, &route]).observe(started.elapsed().as_secs_f64());
    }
    response
}
