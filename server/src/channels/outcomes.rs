//! Outcome reports over HTTP, for applications that do not embed the Rust client.

use actix_web::{post, web, HttpResponse};
use client::health::{ChannelCode, OutcomeCounts, OutcomeError, MAX_CALLS, MAX_COUNT};
use serde_json::Value;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The body's fields, in the order they are checked.
const FIELDS: [&str; 4] = ["ok", "fail", "latency_ms_sum", "latency_count"];

/// `POST /api/v1/channels/{code}/outcomes` with `{"ok", "fail", "latency_ms_sum"?,
/// "latency_count"?}` (integers 0..=10^9; calls that succeeded and failed since the last
/// report, and the sum and number of the latencies measured, in ms) → 202
/// `{"channel","minute"}` with the unix minute they were counted in; 400 naming the field
/// for a bad code or body; 404 for a channel with no row in `channel`; 503 when Redis is
/// unreachable (the report is dropped: callers may ignore the failure). No token: this is
/// data plane, like draws. While Postgres is unreachable the channel is not looked up and
/// the report is recorded anyway (the data plane does not depend on Postgres).
#[utoipa::path(
    tag = "health",
    summary = "Reports the outcomes of calls through a channel (feeds health decay and ejection)",
    params(("code" = String, Path, description = "The channel's code: 1..=64 of `[A-Za-z0-9_.-]`", pattern = "^[A-Za-z0-9_.-]{1,64}$")),
    request_body(content = OutcomeReport),
    responses(
        (status = 202, description = "Counted, in the unix minute given", body = OutcomesRecorded),
        (status = 400, description = "A malformed code or body, naming the field", body = ErrorBody),
        (status = 404, description = "No such channel", body = ErrorBody),
        (status = 503, description = "Redis is unreachable: the report was dropped (callers may ignore this)", body = ErrorBody),
    )
)]
#[post("/api/v1/channels/{code}/outcomes")]
pub async fn record_outcomes(
    req: actix_web::HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let channel = ChannelCode::parse(&path)?;
    crate::access::principal(&req)?.serves(crate::access::bindings::Resource::Channel, channel.as_str())?;
    let counts = parse_counts(&body)?;
    // Per-channel series only for a channel known to exist: the labels come from the
    // configured channels, never from what a caller makes up.
    let mut known = false;
    match crate::channels::store::exists(&state.db, channel.as_str()).await {
        Ok(true) => known = true,
        Ok(false) => return Err(ApiError::NotFound(format!("unknown channel {:?}", channel.as_str()))),
        Err(e) => match ApiError::from(e) {
            ApiError::Unavailable(why) => {
                tracing::warn!(channel = %channel, error = %why, "postgres unreachable: outcome report recorded without looking the channel up");
            }
            other => return Err(other),
        },
    }
    match state.outcomes.record_counts(&channel, &counts).await {
        Ok(minute) => {
            if known {
                count_outcomes(&state.metrics.watch, channel.as_str(), &counts);
            }
            Ok(HttpResponse::Accepted().json(OutcomesRecorded { channel, minute }))
        }
        Err(OutcomeError::Unavailable(e)) => {
            Err(ApiError::Unavailable(format!("redis unreachable; the report was not recorded: {e}")))
        }
        Err(OutcomeError::Invalid(e)) => Err(e.into()),
        Err(e) => Err(ApiError::Unexpected(anyhow::Error::new(e))),
    }
}

/// Adds a recorded report to the channel's outcome and latency counters.
fn count_outcomes(watch: &crate::metrics::WatchMetrics, channel: &str, counts: &OutcomeCounts) {
    watch.channel_outcomes.with_label_values(&[channel, "ok"]).inc_by(counts.ok);
    watch.channel_outcomes.with_label_values(&[channel, "fail"]).inc_by(counts.fail);
    if counts.latency_count > 0 {
        watch.channel_latency_ms.with_label_values(&[channel]).inc_by(counts.latency_ms_sum);
        watch.channel_latency_samples.with_label_values(&[channel]).inc_by(counts.latency_count);
    }
}

/// An outcome report's body (its schema: the handler reads it field by field, so that every
/// refusal names its field). `ok`, `fail` and `latency_count` are integers in 0..=10,000
/// (one report cannot outweigh a window: more calls, more reports), `latency_ms_sum` in
/// 0..=10^9, and a report counts at least one outcome (`ok + fail` ≥ 1): one shape with a
/// success, one with failures only.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum OutcomeReport {
    WithSuccesses(OutcomesWithSuccesses),
    FailuresOnly(OutcomesFailuresOnly),
}

/// A report counting at least one success.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomesWithSuccesses {
    /// Calls through the channel that succeeded since the last report.
    #[schema(minimum = 1, maximum = 10000)]
    pub ok: u64,
    /// Calls that failed since the last report.
    #[schema(maximum = 10000)]
    pub fail: u64,
    /// The sum of the latencies measured, in ms (only with `latency_count`).
    #[schema(maximum = 1000000000)]
    pub latency_ms_sum: Option<u64>,
    /// How many latencies were measured (≤ `ok + fail`).
    #[schema(maximum = 10000)]
    pub latency_count: Option<u64>,
}

/// A report counting failures only.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomesFailuresOnly {
    /// No call succeeded.
    #[schema(maximum = 0)]
    pub ok: u64,
    /// Calls that failed since the last report.
    #[schema(minimum = 1, maximum = 10000)]
    pub fail: u64,
    /// The sum of the latencies measured, in ms (only with `latency_count`).
    #[schema(maximum = 1000000000)]
    pub latency_ms_sum: Option<u64>,
    /// How many latencies were measured (≤ `ok + fail`).
    #[schema(maximum = 10000)]
    pub latency_count: Option<u64>,
}

/// What a report answers: the channel and the unix minute the counts went into.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct OutcomesRecorded {
    #[schema(value_type = String)]
    channel: ChannelCode,
    minute: i64,
}

/// Parses the body field by field, so that every refusal names its field.
fn parse_counts(body: &[u8]) -> Result<OutcomeCounts, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request("body", format!("not JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(ApiError::bad_request("body", "must be a JSON object with ok and fail"));
    };
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            unknown.as_str(),
            format!("unknown field; expected one of {}", FIELDS.join(", ")),
        ));
    }
    let mut numbers = [0u64; 4];
    for (slot, field) in numbers.iter_mut().zip(FIELDS) {
        *slot = match object.get(field) {
            None | Some(Value::Null) if field == "ok" || field == "fail" => {
                return Err(ApiError::bad_request(field, "is required"))
            }
            None | Some(Value::Null) => 0,
            Some(v) => {
                let max = if field == "latency_ms_sum" { MAX_COUNT } else { MAX_CALLS };
                v.as_number().and_then(crate::inputs::exact_integer).and_then(|v| u64::try_from(v).ok()).ok_or_else(
                    || ApiError::bad_request(field, format!("must be an integer from 0 to {max}, got {v}")),
                )?
            }
        };
    }
    let [ok, fail, latency_ms_sum, latency_count] = numbers;
    Ok(OutcomeCounts::new(ok, fail, latency_ms_sum, latency_count)?)
}
