//! Reserve: admit an estimate of a request's tokens (with its daily request count and a
//! concurrency lease) or refuse, saying which limit ran out; under `fail_open_limited`,
//! admitted in this process while Redis is away.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::call::CallError;
use super::{parts, state, Part, QuotaError, Quotas, ReservationState, Source};
use super::{FallbackPolicy, RequestId, TenantId, Tokens};
use crate::reply::Fields;
use crate::scripts;

/// An admitted reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Reservation {
    pub tokens: u64,
    /// When the sweeper may return it (ms since the epoch, by the Redis clock); 0 for a
    /// fallback admission.
    pub deadline_ms: i64,
    /// The buckets holding it, in paying order.
    pub parts: Vec<Part>,
    /// True when this request id had reserved before: nothing more was reserved.
    pub replayed: bool,
    pub state: ReservationState,
    pub source: Source,
}

/// The limit a refused reservation ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Tokens,
    Requests,
    Concurrency,
    /// The local allowance of a `fail_open_limited` tenant while Redis is unreachable.
    FallbackAllowance,
}

impl Dimension {
    /// The name in replies and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Requests => "requests",
            Self::Concurrency => "concurrency",
            Self::FallbackAllowance => "fallback_allowance",
        }
    }
}

/// A refusal: which dimension ran out, what is left of it, and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub dimension: Dimension,
    pub available: u64,
    pub limit: u64,
}

/// What `reserve` decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ReserveOutcome {
    Reserved(Reservation),
    Refused(Refusal),
}

impl Quotas {
    /// Admits `tokens` for one request — with its daily request count and a concurrency
    /// lease — or refuses, saying which dimension ran out. Retrying with the same request
    /// id returns the first result and reserves nothing more.
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request), err)]
    pub async fn reserve(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
    ) -> Result<ReserveOutcome, QuotaError> {
        self.reserve_for_model(tenant, request, tokens, None).await
    }

    /// [`Quotas::reserve`] for a request to `model`, which the usage ledger then records
    /// with its use (control characters are left out of the name).
    #[tracing::instrument(level = "debug", skip_all, fields(tenant = %tenant, request_id = %request), err)]
    pub async fn reserve_for_model(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        model: Option<&str>,
    ) -> Result<ReserveOutcome, QuotaError> {
        let model: String = model.unwrap_or_default().chars().filter(|c| !c.is_control()).take(128).collect();
        let chunk = self.chunk_argument(tenant, tokens.get());
        let chunked = !chunk.is_empty();
        let extra = vec![request.as_str().to_owned(), tokens.get().to_string(), "0".to_owned(), model, chunk];
        let reply = match self.coalesced("reserve_quota", tenant, &extra).await {
            Some(reply) => reply,
            None => match self.call("reserve_quota", &scripts::quota().reserve, tenant, &extra).await {
                Ok(reply) => reply,
                Err(CallError::Unreachable(error)) => {
                    return self.reserve_offline(tenant, request, tokens, error).await
                }
                Err(other) => return Err(other.into_quota_error()),
            },
        };
        let f = Fields::new("reserve_quota", &reply);
        let outcome = match f.str(0)? {
            "reserved" => ReserveOutcome::Reserved(Reservation {
                tokens: f.uint(2)?,
                deadline_ms: f.int(3)?,
                parts: parts(&f, 4)?,
                replayed: f.int(5)? == 1,
                state: state(&f, 6)?,
                source: Source::Redis,
            }),
            "refused" => ReserveOutcome::Refused(Refusal {
                dimension: match f.str(2)? {
                    "tokens" => Dimension::Tokens,
                    "requests" => Dimension::Requests,
                    "concurrency" => Dimension::Concurrency,
                    other => return Err(f.unexpected(other).into()),
                },
                available: f.uint(3)?,
                limit: f.uint(4)?,
            }),
            "unknown_tenant" => return Err(QuotaError::UnknownTenant(tenant.clone())),
            other => return Err(f.unexpected(other).into()),
        };
        // What the tenant's chunk holds now (-1: none; not an integer: the script did not
        // look at it).
        let chunk_at = if matches!(outcome, ReserveOutcome::Reserved(_)) { 7 } else { 5 };
        if chunked && matches!(reply.get(chunk_at), Some(redis::Value::Int(_))) {
            self.noted_chunk(tenant, u64::try_from(f.int(chunk_at)?).ok());
        }
        self.note_version(tenant, f.uint(1)?).await;
        if let Some(m) = &self.inner.metrics {
            match &outcome {
                ReserveOutcome::Reserved(r) if !r.replayed => {
                    m.reserves.with_label_values(&["admitted", "none", "redis"]).inc()
                }
                ReserveOutcome::Refused(r) => {
                    m.reserves.with_label_values(&["refused", r.dimension.name(), "redis"]).inc();
                    m.refusals.with_label_values(&[tenant.as_str(), r.dimension.name(), "redis"]).inc();
                }
                _ => {}
            }
        }
        Ok(outcome)
    }

    async fn reserve_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        error: redis::RedisError,
    ) -> Result<ReserveOutcome, QuotaError> {
        let policy = self.policy(tenant);
        let FallbackPolicy::FailOpenLimited { allowance } = policy else {
            if let Some(m) = &self.inner.metrics {
                m.fallback.with_label_values(&["fail_closed", "refused"]).inc();
            }
            return Err(QuotaError::Unavailable { tenant: tenant.clone(), policy: policy.name(), source: error });
        };
        let (outcome, acks) = self.admit_offline(tenant, request, tokens, allowance.get())?;
        // Answered only once the admission is on disk (with a journal file); when it cannot
        // be written, it is taken back and refused (fail closed).
        let admitted = matches!(&outcome, ReserveOutcome::Reserved(r) if !r.replayed);
        self.recorded(tenant, request, acks, admitted.then_some(super::offline::Change::Admission)).await?;
        Ok(outcome)
    }

    fn admit_offline(
        &self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        allowance: u64,
    ) -> Result<(ReserveOutcome, super::journal::Acks), QuotaError> {
        let mut journal = self.inner.offline.lock().expect("offline journal lock");
        let outcome = journal.admit(tenant, request, tokens, allowance).map_err(|why| self.no_room(tenant, why))?;
        let metric_event = match &outcome {
            ReserveOutcome::Reserved(r) if r.replayed => None,
            ReserveOutcome::Reserved(_) => Some(("admitted", "none")),
            ReserveOutcome::Refused(_) => Some(("refused", Dimension::FallbackAllowance.name())),
        };
        if let (Some(m), Some((event, dimension))) = (&self.inner.metrics, metric_event) {
            m.fallback.with_label_values(&["fail_open_limited", event]).inc();
            m.reserves.with_label_values(&[event, dimension, Source::Fallback.name()]).inc();
            if event == "refused" {
                m.refusals.with_label_values(&[tenant.as_str(), dimension, Source::Fallback.name()]).inc();
            }
            m.offline_pending.set(journal.len() as i64);
        }
        if metric_event.map(|(e, _)| e) == Some("admitted") {
            tracing::warn!(tenant = %tenant, request_id = %request, tokens = tokens.get(), "admitted without redis under fail_open_limited; charged when redis is back");
        }
        if !journal.is_empty() {
            self.inner.has_offline.store(true, Ordering::Release);
        }
        Ok((outcome, journal.take_acks()))
    }
}
