//! One script call on a tenant's keys: alone, or shared by concurrent operations through
//! the coalescer; with the period retry, the breaker, the offline journal flushed first,
//! and the tenant's fallback policy learnt from its snapshot.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Value;

use super::{FallbackPolicy, KnownPolicy, QuotaError, Quotas, TenantId, Tokens};
use crate::clock::Period;
use crate::connection::{is_unreachable, Breaker};
use crate::reply::Fields;
use crate::scripts;

impl Quotas {
    /// Waits for this operation's turn in the tenant's next shared call of `name`
    /// (`reserve_quota` or `settle_quota`): its own reply, or `None` when it must go alone
    /// (coalescing off, Redis unreachable, or a reply that was not per request).
    pub(super) async fn coalesced(
        &self,
        name: &'static str,
        tenant: &TenantId,
        extra: &[String],
    ) -> Option<Vec<Value>> {
        // A tenant this client does not know goes alone: names sent from outside make no
        // queue (the script answers them `unknown_tenant`).
        if !self.inner.coalescer.is_on() || self.inner.breaker.is_open() || !self.knows(tenant) {
            return None;
        }
        let this = self.clone();
        let flush = move |(name, tenant): (&'static str, TenantId), ops: Vec<Vec<String>>| {
            let this = this.clone();
            async move {
                let script = if name == "settle_quota" { &scripts::quota().settle } else { &scripts::quota().reserve };
                let n = ops.len();
                match this.call(name, script, &tenant, &ops.concat()).await {
                    Ok(reply) if n == 1 => vec![Some(reply)],
                    Ok(reply) => per_request(reply, n),
                    Err(_) => Vec::new(),
                }
            }
        };
        self.inner.coalescer.submit(&(name, tenant.clone()), 1, extra.to_vec(), flush).await
    }

    /// Runs a script once (with one retry when the period turned), flushing the offline
    /// journal first when there is one.
    pub(super) async fn call(
        &self,
        name: &'static str,
        script: &scripts::QuotaFn,
        tenant: &TenantId,
        extra: &[String],
    ) -> Result<Vec<Value>, CallError> {
        if self.inner.breaker.is_open() {
            return Err(CallError::Unreachable(Breaker::skipped_error()));
        }
        if self.inner.has_offline.load(Ordering::Acquire) {
            match self.flush_offline().await {
                Ok(_) => {}
                Err(QuotaError::Redis(e)) if is_unreachable(&e) => return Err(self.went_down(e)),
                Err(QuotaError::Unavailable { source, .. }) => return Err(self.went_down(source)),
                // Kept for the next attempt; this caller's own operation is not held up.
                Err(other) => {
                    tracing::error!(error = %other, "replaying the offline journal failed; kept for the next attempt")
                }
            }
        }
        let mut result = self.call_direct(name, script, tenant, extra).await;
        // After an outage the connection manager reports the failed reconnect once and
        // only then reconnects: one immediate retry (not after a timeout, which already
        // waited) lets the first call after Redis returns succeed.
        if let Err(QuotaError::Redis(e)) = &result {
            if is_unreachable(e) && !e.is_timeout() {
                result = self.call_direct(name, script, tenant, extra).await;
            }
        }
        match result {
            Ok(reply) => {
                self.inner.breaker.reset();
                if self.inner.redis_down.swap(false, Ordering::AcqRel) {
                    tracing::info!("redis answers again: quota decisions are made in redis");
                }
                let unknown = matches!(reply.first(), Some(Value::BulkString(tag)) if tag == b"unknown_tenant");
                if unknown && self.knows(tenant) {
                    // Redis lost a tenant this client knows (a restart, an empty replica):
                    // its fallback policy applies until the control plane republishes it.
                    self.note_missing(tenant);
                    return Err(CallError::Unreachable(missing_error(tenant)));
                }
                Ok(reply)
            }
            Err(QuotaError::Redis(e)) if is_unreachable(&e) => Err(self.went_down(e)),
            Err(other) => Err(CallError::Failed(other)),
        }
    }

    fn went_down(&self, error: redis::RedisError) -> CallError {
        self.inner.breaker.trip();
        if !self.inner.redis_down.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %error, "redis unreachable: quota decisions follow each tenant's fallback policy");
        }
        CallError::Unreachable(error)
    }

    pub(super) async fn call_direct(
        &self,
        name: &'static str,
        script: &scripts::QuotaFn,
        tenant: &TenantId,
        extra: &[String],
    ) -> Result<Vec<Value>, QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let mut period = Period::of(self.inner.clock.guess());
        for _attempt in 0..2 {
            let keys = &self.inner.keys;
            let t = tenant.as_str();
            let mut call = script.key(keys.quota_meta(t));
            call.key(keys.quota_state(t))
                .key(keys.quota_ledger(t))
                .key(keys.quota_leases(t))
                .key(keys.quota_period(t, &period.to_string()))
                .key(keys.quota_period(t, &period.previous().to_string()))
                .key(keys.quota_usage(t))
                .key(keys.quota_done(t))
                .key(keys.quota_chunks(t))
                .arg(period.to_string())
                .arg(period.previous().to_string())
                .arg(self.inner.clock.script_arg());
            for a in extra {
                call.arg(a);
            }
            let started = Instant::now();
            let reply: Value = call.invoke_async(&mut conn).await.map_err(QuotaError::Redis)?;
            if let Some(m) = &self.inner.metrics {
                m.script_seconds.with_label_values(&[name]).observe(started.elapsed().as_secs_f64());
            }
            let items = match reply {
                Value::Array(items) => items,
                other => return Err(QuotaError::Protocol { script: name, detail: format!("not an array: {other:?}") }),
            };
            let f = Fields::new(name, &items);
            if items.len() == 2 && f.str(0).ok() == Some("period") {
                let actual = f.str(1)?;
                period = Period::parse(actual)
                    .ok_or_else(|| QuotaError::Protocol { script: name, detail: format!("bad period {actual:?}") })?;
                continue;
            }
            return Ok(items);
        }
        Err(QuotaError::Protocol { script: name, detail: "the period changed twice during one call".into() })
    }

    /// Learns the tenant's fallback policy when its snapshot version is new to this client.
    pub(super) async fn note_version(&self, tenant: &TenantId, version: u64) {
        let known = self.inner.policies.lock().expect("policy lock").get(tenant).map(|k| k.version);
        if known == Some(version) {
            return;
        }
        let Ok(mut conn) = self.inner.redis.connection().await else { return };
        let fields: redis::RedisResult<(Option<String>, Option<u64>)> = redis::cmd("HMGET")
            .arg(self.inner.keys.quota_meta(tenant.as_str()))
            .arg("policy")
            .arg("fallback_allowance")
            .query_async(&mut conn)
            .await;
        let policy = match fields {
            Ok((Some(p), Some(allowance))) if p == "fail_open_limited" => {
                match Tokens::parse("fallback_allowance", allowance as i128) {
                    Ok(allowance) => FallbackPolicy::FailOpenLimited { allowance },
                    Err(_) => FallbackPolicy::FailClosed,
                }
            }
            Ok(_) => FallbackPolicy::FailClosed,
            Err(_) => return,
        };
        self.inner.policies.lock().expect("policy lock").insert(tenant.clone(), KnownPolicy { version, policy });
    }

    pub(super) fn policy(&self, tenant: &TenantId) -> FallbackPolicy {
        self.inner
            .policies
            .lock()
            .expect("policy lock")
            .get(tenant)
            .map(|k| k.policy)
            .unwrap_or(FallbackPolicy::FailClosed)
    }
}

/// The error a call of a known tenant reports while Redis lacks the tenant's snapshot.
fn missing_error(tenant: &TenantId) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("redis holds no snapshot of tenant {tenant:?} (lost with a restart?); republishing"),
    ))
}

/// The replies of a shared call, one per request in order; empty when the call answered
/// for none of them in particular (an unknown tenant: each goes alone and hears it).
fn per_request(reply: Vec<Value>, n: usize) -> Vec<Option<Vec<Value>>> {
    let mut items = reply.into_iter();
    match (items.next(), items.next()) {
        (Some(Value::BulkString(tag)), Some(Value::Array(replies))) if tag == b"batch" && replies.len() == n => replies
            .into_iter()
            .map(|r| match r {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Why a script call failed: Redis unreachable (the fallback policy applies) or anything else.
pub(super) enum CallError {
    Unreachable(redis::RedisError),
    Failed(QuotaError),
}

impl CallError {
    pub(super) fn into_quota_error(self) -> QuotaError {
        match self {
            Self::Unreachable(e) => QuotaError::Redis(e),
            Self::Failed(e) => e,
        }
    }
}
