//! The quota data plane over HTTP: reserve, settle, release, and the tenant's usage.

use actix_web::{get, post, web, HttpResponse};
use client::estimate::Estimate;
use client::estimate::{estimate, DEFAULT_MARGIN};
use client::quota::{
    QuotaUsage, ReleaseOutcome, RequestId, Reservation, ReserveOutcome, SettleOutcome, TenantId, TokenCount, Tokens,
};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The largest `max_tokens` a request may declare (far above any model's output limit).
const MAX_OUTPUT_TOKENS: u64 = 10_000_000;
/// The largest prompt accepted for an estimate, in bytes.
const MAX_PROMPT_BYTES: usize = 4 * 1024 * 1024;

/// At most this many prompts are counted at once: the tokenizer is CPU work (linear in the
/// prompt, see [`client::estimate::MAX_RUN_BYTES`]), and a flood of large prompts must
/// not take every core from the draws.
static ESTIMATING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// How long a prompt waits for its turn before it is refused (429, Retry-After 1).
const ESTIMATE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A turn at the tokenizer, or 429 when none came within [`ESTIMATE_WAIT`].
async fn estimating() -> Result<tokio::sync::SemaphorePermit<'static>, ApiError> {
    match tokio::time::timeout(ESTIMATE_WAIT, ESTIMATING.acquire()).await {
        Ok(permit) => Ok(permit.expect("the estimate semaphore is never closed")),
        Err(_) => Err(ApiError::Throttled {
            message: "too many prompts are being estimated on this server: retry, or reserve tokens directly".into(),
            retry_after_secs: 1,
        }),
    }
}

fn tenant(raw: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(raw).map_err(ApiError::from)
}

/// 403 unless the caller may use `tenant`'s quota (a data-plane token bound to it).
fn bound_to(req: &actix_web::HttpRequest, tenant: &TenantId) -> Result<(), ApiError> {
    crate::access::principal(req)?.serves(crate::access::bindings::Resource::Tenant, tenant.as_str())
}

/// A reserve body: an amount of tokens, or a prompt to estimate from.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveBody {
    /// The caller's id for this request: a retried reserve with the same id reserves nothing more.
    request_id: RequestId,
    /// Tokens to reserve. Give either this, or `prompt` with `max_tokens` and `model`.
    tokens: Option<Tokens>,
    /// A prompt (at most 4 MiB) whose tokens are counted by the model's tokenizer; the
    /// reservation is `ceil((prompt tokens + max_tokens) × 1.05)`.
    prompt: Option<String>,
    /// The most tokens the model may write; required with `prompt`.
    #[schema(maximum = 10000000)]
    #[serde(default, deserialize_with = "crate::inputs::optional_integer")]
    max_tokens: Option<u64>,
    /// The model whose tokenizer counts the prompt (1..=128 characters); required with `prompt`.
    model: Option<String>,
}

/// A reserve body as documented: an amount of tokens, or a prompt to estimate from; never
/// both, never neither ([`ReserveBody`] reads either and refuses the rest, naming the field).
/// An estimate reserves at least one token: an empty prompt needs a `max_tokens` above 0.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "the documented shape: utoipa reads it, ReserveBody parses requests")]
pub enum ReserveRequest {
    Tokens(ReserveTokens),
    Prompt(ReservePrompt),
    EmptyPrompt(ReserveEmptyPrompt),
}

/// Reserve an amount of tokens.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "the documented shape: utoipa reads it, ReserveBody parses requests")]
pub struct ReserveTokens {
    /// The caller's id for this request: a retried reserve with the same id reserves nothing more.
    pub request_id: RequestId,
    /// Tokens to reserve, 1..=2^53−1.
    #[schema(value_type = u64, minimum = 1, maximum = 9007199254740991_u64)]
    pub tokens: Tokens,
}

/// Reserve what a prompt and the most the model may write are estimated to use.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "the documented shape: utoipa reads it, ReserveBody parses requests")]
pub struct ReservePrompt {
    /// The caller's id for this request: a retried reserve with the same id reserves nothing more.
    pub request_id: RequestId,
    /// A prompt (at most 4 MiB) whose tokens are counted by the model's tokenizer; the
    /// reservation is `ceil((prompt tokens + max_tokens) × 1.05)`.
    #[schema(min_length = 1)]
    pub prompt: String,
    /// The most tokens the model may write.
    #[schema(maximum = 10000000)]
    pub max_tokens: u64,
    /// The model whose tokenizer counts the prompt (1..=128 characters).
    #[schema(min_length = 1, max_length = 128)]
    pub model: String,
}

/// Reserve what the model may write after an empty prompt.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, reason = "the documented shape: utoipa reads it, ReserveBody parses requests")]
pub struct ReserveEmptyPrompt {
    /// The caller's id for this request: a retried reserve with the same id reserves nothing more.
    pub request_id: RequestId,
    /// An empty prompt.
    #[schema(max_length = 0)]
    pub prompt: String,
    /// The most tokens the model may write: at least 1, so that something is reserved.
    #[schema(minimum = 1, maximum = 10000000)]
    pub max_tokens: u64,
    /// The model (1..=128 characters).
    #[schema(min_length = 1, max_length = 128)]
    pub model: String,
}

/// A reservation as answered: what was reserved, under which request id, and the estimate
/// when the amount was estimated from a prompt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReserveReply {
    /// Always `reserved` (a refusal is a 429).
    #[schema(example = "reserved")]
    result: &'static str,
    request_id: RequestId,
    #[serde(flatten)]
    reservation: Reservation,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<Estimate>,
}

/// Reserves tokens for one request, before calling the model.
///
/// Idempotent by `request_id`. 200 with the reservation, 429 with the dimension that ran
/// out, 404 for an unknown tenant, 400 for a bad body.
#[utoipa::path(
    tag = "quota",
    params(("tenant" = TenantId, Path, description = "The tenant whose quota pays")),
    request_body(content = ReserveRequest),
    responses(
        (status = 200, description = "Reserved (`replayed` when this request id had reserved before)", body = ReserveReply),
        (status = 400, description = "A malformed tenant or body, naming the field and the rule", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
        (status = 429, description = "Refused: a quota dimension ran out, nothing reserved (a `QuotaRefusedBody`); or, for a prompt, the server is estimating as many prompts as it may at once (an `ErrorBody`, with `Retry-After`)", body = crate::schema::RefusedOrThrottledBody),
        (status = 503, description = "The quota store is unreachable and the tenant's fallback policy refuses, or what would be kept for it could not be (the journal not written, 10,000 operations of the tenant waiting, a tenant this process does not know): nothing was done", body = ErrorBody),
    )
)]
#[post("/api/v1/tenants/{tenant}/quota/reserve")]
pub async fn reserve_quota(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReserveBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    bound_to(&req, &tenant)?;
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
            let max_tokens =
                body.max_tokens.ok_or_else(|| ApiError::bad_request("max_tokens", "is required with prompt"))?;
            if max_tokens > MAX_OUTPUT_TOKENS {
                return Err(ApiError::bad_request("max_tokens", format!("must be at most {MAX_OUTPUT_TOKENS}")));
            }
            let model = body.model.ok_or_else(|| ApiError::bad_request("model", "is required with prompt"))?;
            let for_model = model.clone();
            let _permit = estimating().await?;
            let e = web::block(move || estimate(&prompt, max_tokens, &for_model, DEFAULT_MARGIN))
                .await
                .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("estimate task: {e}")))??;
            (e.tokens, Some((e, model)))
        }
        (Some(_), Some(_)) => return Err(ApiError::bad_request("tokens", "give either tokens or prompt, not both")),
        (None, None) => {
            return Err(ApiError::bad_request("tokens", "is required (or prompt with max_tokens and model)"))
        }
    };
    let request_id = body.request_id;
    let model = estimated.as_ref().map(|(_, model)| model.as_str());
    let estimated = estimated.as_ref().map(|(e, _)| e.clone());
    if let Some(reservation) = super::repeat::reserve_from_ledger(&state, &tenant, &request_id).await {
        return Ok(HttpResponse::Ok().json(ReserveReply {
            result: "reserved",
            request_id,
            reservation,
            estimate: estimated,
        }));
    }
    match state.quotas.reserve_for_model(&tenant, &request_id, tokens, model).await.map_err(ApiError::from)? {
        ReserveOutcome::Reserved(reservation) => Ok(HttpResponse::Ok().json(ReserveReply {
            result: "reserved",
            request_id,
            reservation,
            estimate: estimated,
        })),
        ReserveOutcome::Refused(r) => {
            Err(ApiError::QuotaRefused { dimension: r.dimension.name(), available: r.available, limit: r.limit })
        }
    }
}

/// Reads `actual_tokens` naming that field in its refusal.
fn actual_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TokenCount, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let integer = value
        .as_number()
        .and_then(crate::inputs::exact_integer)
        .ok_or_else(|| serde::de::Error::custom(format!("actual_tokens: must be an integer, got {value}")))?;
    TokenCount::parse("actual_tokens", integer).map_err(serde::de::Error::custom)
}

/// A settle body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    /// The request id the tokens were reserved under.
    request_id: RequestId,
    /// The tokens the request really used (may exceed the reservation: an overdraft).
    #[serde(deserialize_with = "actual_tokens")]
    #[schema(value_type = u64, maximum = 9007199254740991_u64)]
    actual_tokens: TokenCount,
    /// The stream broke part-way: `actual_tokens` is what was consumed before it did
    /// (charged as for any settle).
    #[serde(default)]
    partial: bool,
}

/// Settles a reservation with the tokens really used, refunding the rest.
///
/// 200 with what was charged (or that it was already settled / released), 202 when Redis
/// is unreachable and the settle is queued, 404 for an unknown tenant or request id. A
/// request id with no reservation within a reservation's TTL after the tenant's counters
/// were restored (lost with a Redis that restarted empty) is charged: late, reserved 0.
#[utoipa::path(
    tag = "quota",
    params(("tenant" = TenantId, Path, description = "The tenant whose quota pays")),
    responses(
        (status = 200, description = "Settled (`late` when the reservation had expired, or was lost with a Redis that restarted empty: the use is charged all the same), or already settled / released (nothing changed)", body = SettleOutcome),
        (status = 202, description = "Redis is unreachable: the settle is kept and applied when it answers (`result: queued`)", body = SettleOutcome),
        (status = 400, description = "A malformed tenant or body, naming the field and the rule", body = ErrorBody),
        (status = 404, description = "Unknown tenant, or no reservation with this request id", body = ErrorBody),
        (status = 503, description = "The quota store is unreachable and the tenant's fallback policy refuses, or what would be kept for it could not be (the journal not written, 10,000 operations of the tenant waiting, a tenant this process does not know): nothing was done", body = ErrorBody),
    )
)]
#[post("/api/v1/tenants/{tenant}/quota/settle")]
pub async fn settle_quota(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<SettleBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    bound_to(&req, &tenant)?;
    let mut outcome = state
        .quotas
        .settle(&tenant, &body.request_id, body.actual_tokens, body.partial)
        .await
        .map_err(ApiError::from)?;
    if outcome == SettleOutcome::Unknown {
        outcome =
            super::repeat::settle_unknown(&state, &tenant, &body.request_id, body.actual_tokens, body.partial).await?;
    }
    if outcome == SettleOutcome::Unknown {
        return Err(ApiError::NotFound(format!("no reservation with request_id {:?}", body.request_id.as_str())));
    }
    let status = if outcome == SettleOutcome::Queued { 202 } else { 200 };
    Ok(HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid")).json(outcome))
}

/// A release body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The request id the tokens were reserved under.
    request_id: RequestId,
}

/// Releases a reservation whose request failed: every reserved token is refunded.
///
/// 200 (released, or already), 202 when queued while Redis is unreachable, 404 unknown.
#[utoipa::path(
    tag = "quota",
    params(("tenant" = TenantId, Path, description = "The tenant whose quota pays")),
    responses(
        (status = 200, description = "Released, or already released / settled (nothing changed)", body = ReleaseOutcome),
        (status = 202, description = "Redis is unreachable: the release is kept and applied when it answers (`result: queued`)", body = ReleaseOutcome),
        (status = 400, description = "A malformed tenant or body, naming the field and the rule", body = ErrorBody),
        (status = 404, description = "Unknown tenant, or no reservation with this request id", body = ErrorBody),
        (status = 503, description = "The quota store is unreachable and the tenant's fallback policy refuses, or what would be kept for it could not be (the journal not written, 10,000 operations of the tenant waiting, a tenant this process does not know): nothing was done", body = ErrorBody),
    )
)]
#[post("/api/v1/tenants/{tenant}/quota/release")]
pub async fn release_quota(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReleaseBody>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    bound_to(&req, &tenant)?;
    let mut outcome = state.quotas.release(&tenant, &body.request_id).await.map_err(ApiError::from)?;
    if outcome == ReleaseOutcome::Unknown {
        outcome = super::repeat::release_unknown(&state, &tenant, &body.request_id).await?;
    }
    if outcome == ReleaseOutcome::Unknown {
        return Err(ApiError::NotFound(format!("no reservation with request_id {:?}", body.request_id.as_str())));
    }
    let status = if outcome == ReleaseOutcome::Queued { 202 } else { 200 };
    Ok(HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid")).json(outcome))
}

/// Reads a tenant's quota as it stands: buckets, used, reserved, requests today, leases.
#[utoipa::path(
    tag = "quota",
    params(("tenant" = TenantId, Path, description = "The tenant")),
    responses(
        (status = 200, description = "The tenant's quota now", body = QuotaUsage),
        (status = 400, description = "A malformed tenant name", body = ErrorBody),
        (status = 404, description = "Unknown tenant", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
#[get("/api/v1/tenants/{tenant}/quota")]
pub async fn get_quota(state: web::Data<AppState>, path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let tenant = tenant(&path)?;
    let usage = state.quotas.usage(&tenant).await.map_err(ApiError::from)?;
    Ok(HttpResponse::Ok().json(usage))
}
