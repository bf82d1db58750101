//! Outcome reports over HTTP, for applications that do not embed the Rust client.

use actix_web::{post, web, HttpResponse};
use client::health::{ChannelCode, OutcomeCounts, OutcomeError, MAX_CALLS, MAX_COUNT};
use serde_json::Value;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The body's fields, in the order they are checked (the four numbers, then the list).
const FIELDS: [&str; 5] = ["ok", "fail", "latency_ms_sum", "latency_count", "latencies_ms"];

/// The slowest latency `latencies_ms` takes, in ms (an hour).
const MAX_LATENCY_MS: u64 = 3_600_000;

/// `POST /api/v1/channels/{code}/outcomes` with `{"ok", "fail", "latency_ms_sum"?,
/// "latency_count"?, "latencies_ms"?}` (integers 0..=10^9; calls that succeeded and failed
/// since the last report, the sum and number of the latencies measured, in ms, and
/// latencies one by one, which also feed the channel's latency histogram) → 202
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
    let (counts, latencies) = parse_counts(&body)?;
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
                count_outcomes(&state.metrics.watch, channel.as_str(), &counts, &latencies);
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

/// Adds a recorded report to the channel's outcome and latency counters, and its latencies
/// one by one to the channel's histogram.
fn count_outcomes(watch: &crate::metrics::WatchMetrics, channel: &str, counts: &OutcomeCounts, latencies: &[u64]) {
    watch.channel_outcomes.with_label_values(&[channel, "ok"]).inc_by(counts.ok);
    watch.channel_outcomes.with_label_values(&[channel, "fail"]).inc_by(counts.fail);
    if counts.latency_count > 0 {
        watch.channel_latency_ms.with_label_values(&[channel]).inc_by(counts.latency_ms_sum);
        watch.channel_latency_samples.with_label_values(&[channel]).inc_by(counts.latency_count);
    }
    if !latencies.is_empty() {
        let histogram = watch.channel_latency_seconds.with_label_values(&[channel]);
        for ms in latencies {
            histogram.observe(*ms as f64 / 1000.0);
        }
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
    /// Latencies one by one, in ms (each at most an hour): added to the sum and the count
    /// above, and to the channel's histogram `tessera_channel_latency_seconds`;
    /// `latency_count` + their number ≤ `ok + fail` and ≤ 10,000, and `latency_ms_sum` +
    /// their sum ≤ 10^9.
    #[schema(value_type = Option<Latencies>)]
    pub latencies_ms: Option<Vec<u64>>,
}

/// `latencies_ms`: at most 10,000 integers of 0..=3,600,000 (ms).
pub struct Latencies;

impl utoipa::PartialSchema for Latencies {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
        ArrayBuilder::new()
            .items(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0)).maximum(Some(MAX_LATENCY_MS)))
            .max_items(Some(MAX_CALLS as usize))
            .description(Some("Latencies one by one, in ms (each at most an hour)"))
            .into()
    }
}

impl utoipa::ToSchema for Latencies {}

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
    /// Latencies one by one, in ms, as for a report with successes.
    #[schema(value_type = Option<Latencies>)]
    pub latencies_ms: Option<Vec<u64>>,
}

/// What a report answers: the channel and the unix minute the counts went into.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct OutcomesRecorded {
    #[schema(value_type = String)]
    channel: ChannelCode,
    minute: i64,
}

/// Parses the body field by field, so that every refusal names its field: the counts
/// (with the latencies listed one by one added to the sum and the count) and that list.
fn parse_counts(body: &[u8]) -> Result<(OutcomeCounts, Vec<u64>), ApiError> {
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
                let n = integer(v).ok_or_else(|| {
                    ApiError::bad_request(field, format!("must be an integer from 0 to {max}, got {v}"))
                })?;
                if n > max {
                    let rule = if max == MAX_CALLS { " calls a report (send more reports)" } else { "" };
                    return Err(ApiError::bad_request(field, format!("must be at most {max}{rule}, got {n}")));
                }
                n
            }
        };
    }
    let [ok, fail, latency_ms_sum, latency_count] = numbers;
    // The four numbers first, by their own rules (each field within its bound, so no sum
    // below can overflow); then the list, and what it adds to the sum and the count.
    let counts = OutcomeCounts::new(ok, fail, latency_ms_sum, latency_count)?;
    let latencies = parse_latencies(object.get("latencies_ms"))?;
    if latencies.is_empty() {
        return Ok((counts, latencies));
    }
    let listed = latencies.len() as u64;
    let count = latency_count + listed;
    if count > ok + fail || count > MAX_CALLS {
        return Err(ApiError::bad_request(
            "latencies_ms",
            format!(
                "{listed} latencies with latency_count {latency_count} make {count}: more than ok + fail ({}) or {MAX_CALLS}",
                ok + fail
            ),
        ));
    }
    let sum = latency_ms_sum + latencies.iter().sum::<u64>();
    if sum > MAX_COUNT {
        return Err(ApiError::bad_request(
            "latencies_ms",
            format!("with latency_ms_sum they add up to {sum} ms, more than {MAX_COUNT}"),
        ));
    }
    Ok((OutcomeCounts::new(ok, fail, sum, count)?, latencies))
}

/// A whole number of 0 or more (the bounds are checked where the rule is named).
fn integer(v: &Value) -> Option<u64> {
    v.as_number().and_then(crate::inputs::exact_integer).and_then(|v| u64::try_from(v).ok())
}

/// `latencies_ms`: absent or null for none, else at most [`MAX_CALLS`] integers of
/// 0..=[`MAX_LATENCY_MS`]; a refusal names the entry (`latencies_ms[3]`).
fn parse_latencies(value: Option<&Value>) -> Result<Vec<u64>, ApiError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            return Err(ApiError::bad_request("latencies_ms", format!("must be a list of integers (ms), got {other}")))
        }
    };
    if entries.len() as u64 > MAX_CALLS {
        return Err(ApiError::bad_request(
            "latencies_ms",
            format!("must hold at most {MAX_CALLS} latencies a report (send more reports), got {}", entries.len()),
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, v)| {
            integer(v).filter(|ms| *ms <= MAX_LATENCY_MS).ok_or_else(|| {
                ApiError::bad_request(
                    format!("latencies_ms[{i}]"),
                    format!("must be an integer from 0 to {MAX_LATENCY_MS} (ms), got {v}"),
                )
            })
        })
        .collect()
}
