//! The quota data plane over HTTP: reserve, settle, release, and the tenant's usage.

use actix_web::{get, post, web, HttpResponse};
use client::estimate::{estimate, DEFAULT_MARGIN};
use client::quota::{QuotaError, ReleaseOutcome, RequestId, ReserveOutcome, SettleOutcome, TenantId, TokenCount, Tokens};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

/// The largest `max_tokens` a request may declare (far above any model's output limit).
const MAX_OUTPUT_TOKENS: u64 = 10_000_000;
/// The largest prompt accepted for an estimate, in bytes.
const MAX_PROMPT_BYTES: usize = 4 * 1024 * 1024;

fn tenant(raw: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(raw).map_err(ApiError::from)
}

fn quota_error(e: QuotaError) -> ApiError {
    match e {
        QuotaError::UnknownTenant(t) => ApiError::NotFound(format!("unknown tenant {:?}", t.as_str())),
        QuotaError::Unavailable { tenant, policy, .. } => {
            ApiError::Unavailable(format!("quota store unreachable; tenant {:?} is {policy}", tenant.as_str()))
        }
        QuotaError::Redis(e) if client::is_unreachable(&e) => ApiError::Unavailable(format!("redis unreachable: {e}")),
        other => ApiError::Unexpected(anyhow::Error::new(other)),
    }
}

/// A reserve body: an amount of tokens, or a prompt to estimate from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveBody {
    request_id: RequestId,
    tokens: Option<Tokens>,
    prompt: Option<String>,
    max_tokens: Option<u64>,
    model: Option<String>,
}

/// `POST /api/v1/tenants/{tenant}/quota/reserve`: 200 with the reservation, 429 with the
/// dimension that ran out, 404 for an unknown tenant, 400 for a bad body.
#[post("/api/v1/tenants/{tenant}/quota/reserve")]
pub async fn reserve_quota(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReserveBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    let body = body.into_inner();
    let (tokens, estimated) = match (body.tokens, body.prompt) {
        (Some(tokens), None) => {
            if body.max_tokens.is_some() || body.model.is_some() {
                return Err(ApiError::bad_request("tokens", "give either tokens, or prompt with max_tokens and model"));
            }
            (tokens, None)
        }
        (None, Some(prompt)) => {
            if prompt.len() > MAX_PROMPT_BYTES {
                return Err(ApiError::bad_request("prompt", format!("must be at most {MAX_PROMPT_BYTES} bytes")));
            }
            let max_tokens = body.max_tokens.ok_or_else(|| ApiError::bad_request("max_tokens", "is required with prompt"))?;
            if max_tokens > MAX_OUTPUT_TOKENS {
                return Err(ApiError::bad_request("max_tokens", format!("must be at most {MAX_OUTPUT_TOKENS}")));
            }
            let model = body.model.ok_or_else(|| ApiError::bad_request("model", "is required with prompt"))?;
            let e = web::block(move || estimate(&prompt, max_tokens, &model, DEFAULT_MARGIN))
                .await
                .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("estimate task: {e}")))??;
            (e.tokens, Some(e))
        }
        (Some(_), Some(_)) => return Err(ApiError::bad_request("tokens", "give either tokens or prompt, not both")),
        (None, None) => return Err(ApiError::bad_request("tokens", "is required (or prompt with max_tokens and model)")),
    };
    let request_id = body.request_id;
    match state.quotas.reserve(&tenant, &request_id, tokens).await.map_err(quota_error)? {
        ReserveOutcome::Reserved(r) => {
            let mut body = serde_json::to_value(&r).map_err(anyhow::Error::from)?;
            body["result"] = json!("reserved");
            body["request_id"] = json!(request_id.as_str());
            if let Some(e) = estimated {
                body["estimate"] = serde_json::to_value(&e).map_err(anyhow::Error::from)?;
            }
            Ok(HttpResponse::Ok().json(body))
        }
        ReserveOutcome::Refused(r) => {
            Err(ApiError::QuotaRefused { dimension: r.dimension.name(), available: r.available, limit: r.limit })
        }
    }
}

/// Reads `actual_tokens` naming that field in its refusal.
fn actual_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TokenCount, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let integer = value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from))
        .ok_or_else(|| serde::de::Error::custom(format!("actual_tokens: must be an integer, got {value}")))?;
    TokenCount::parse("actual_tokens", integer).map_err(serde::de::Error::custom)
}

/// A settle body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    request_id: RequestId,
    #[serde(deserialize_with = "actual_tokens")]
    actual_tokens: TokenCount,
    #[serde(default)]
    partial: bool,
}

/// `POST /api/v1/tenants/{tenant}/quota/settle`: 200 with what was charged (or that it
/// was already settled / released), 404 for an unknown request id or tenant.
#[post("/api/v1/tenants/{tenant}/quota/settle")]
pub async fn settle_quota(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SettleBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    let outcome = state
        .quotas
        .settle(&tenant, &body.request_id, body.actual_tokens, body.partial)
        .await
        .map_err(quota_error)?;
    if outcome == SettleOutcome::Unknown {
        return Err(ApiError::NotFound(format!("no reservation with request_id {:?}", body.request_id.as_str())));
    }
    let status = if outcome == SettleOutcome::Queued { 202 } else { 200 };
    Ok(HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid")).json(outcome))
}

/// A release body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    request_id: RequestId,
}

/// `POST /api/v1/tenants/{tenant}/quota/release`: 200 (released, or already), 404 unknown.
#[post("/api/v1/tenants/{tenant}/quota/release")]
pub async fn release_quota(
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReleaseBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    let outcome = state.quotas.release(&tenant, &body.request_id).await.map_err(quota_error)?;
    if outcome == ReleaseOutcome::Unknown {
        return Err(ApiError::NotFound(format!("no reservation with request_id {:?}", body.request_id.as_str())));
    }
    let status = if outcome == ReleaseOutcome::Queued { 202 } else { 200 };
    Ok(HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid")).json(outcome))
}

/// `GET /api/v1/tenants/{tenant}/quota`: buckets, used, reserved, requests today, leases.
#[get("/api/v1/tenants/{tenant}/quota")]
pub async fn get_quota(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    let usage = state.quotas.usage(&tenant).await.map_err(quota_error)?;
    Ok(HttpResponse::Ok().json(usage))
}
