//! Outcome reports per channel: applications say how their calls through a channel went
//! (success or failure, latency), counted per minute in Redis, where the health evaluation
//! reads them to decay, eject and restore channels (design.md §5).
//!
//! Each report is one `EVALSHA` of `lua/record_outcome.lua` on the channel's hash
//! `{prefix}:health:{<channel>}`, whose fields are `<minute>:ok`, `<minute>:fail`,
//! `<minute>:lat_ms` (the latencies' sum in ms) and `<minute>:lat_n` (how many latencies
//! were summed), `<minute>` being unix minutes by the one clock: Redis `TIME`, or the
//! client's hand-set [`Clock`]. The hash expires two hours ([`RETENTION`]) after its last
//! write; the evaluation job removes older minutes of live channels with
//! [`Outcomes::prune`].
//!
//! Reporting must never hold up or break the request it reports on. A report waits at most
//! the connection's response timeout; while Redis is known to be unreachable it fails at
//! once. A report that Redis did not take is **dropped**: it is not kept or retried (a
//! retry after a cut connection could count it twice), it is counted in
//! [`OutcomeMetrics::dropped`], and the error is returned — callers may ignore it.

mod types;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ErrorKind, ScriptInvocation};

use crate::clock::Clock;
use crate::connection::{is_unreachable, Breaker, RedisHandle};
use crate::keys::Keys;
use crate::metrics::OutcomeMetrics;
use crate::quota::InvalidInput;
use crate::scripts;

/// The largest latency sum (ms) of one report.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// The most calls one report may count as `ok`, as `fail`, or as `latency_count`: a report
/// sums a caller's calls over a short while (a second, say), so that one report, buggy or
/// hostile, cannot outweigh the evidence of a whole window (with 10^9 failures in one
/// report, a channel would stay failing for the window whatever the next reports said).
/// A caller with more calls sends more reports.
pub const MAX_CALLS: u64 = 10_000;

/// How long a channel's outcome hash lives after its last write.
pub const RETENTION: Duration = Duration::from_secs(2 * 60 * 60);

/// The most reports one [`Outcomes::record_many`] call sends.
pub const MAX_REPORTS_PER_CALL: usize = 10_000;

/// The longest channel code.
pub const MAX_CHANNEL_LEN: usize = 64;

const SCRIPT: &str = "record_outcome";

pub use types::*;

struct Inner {
    redis: RedisHandle,
    keys: Keys,
    clock: Clock,
    metrics: Option<OutcomeMetrics>,
    breaker: Breaker,
    redis_down: AtomicBool,
}

/// The outcome reporter (and the evaluation job's reader): cheap to clone, shared by every
/// task of a process.
#[derive(Clone)]
pub struct Outcomes {
    inner: Arc<Inner>,
}

impl Outcomes {
    /// A reporter over `redis` under `keys`, timed by `clock`, recording into `metrics`.
    pub fn new(redis: RedisHandle, keys: Keys, clock: Clock, metrics: Option<OutcomeMetrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                redis,
                keys,
                clock,
                metrics,
                breaker: Breaker::default(),
                redis_down: AtomicBool::new(false),
            }),
        }
    }

    /// The key names this client uses.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Reports one call through `channel`. Returns the minute it was counted in.
    pub async fn record(
        &self,
        channel: &ChannelCode,
        success: bool,
        latency: Option<Duration>,
    ) -> Result<i64, OutcomeError> {
        self.record_counts(channel, &OutcomeCounts::one(success, latency)).await
    }

    /// Reports several calls through `channel`, summed by the caller: one `EVALSHA`.
    /// Returns the minute they were counted in. Counts that break a rule are refused
    /// before anything is sent ([`OutcomeError::Invalid`], not counted as dropped).
    #[tracing::instrument(skip_all, fields(channel = %channel), err(level = "debug"))]
    pub async fn record_counts(&self, channel: &ChannelCode, counts: &OutcomeCounts) -> Result<i64, OutcomeError> {
        counts.validate()?;
        if self.inner.breaker.is_open() {
            return Err(self.dropped(1, Breaker::skipped_error()));
        }
        let mut conn = match self.inner.redis.connection().await {
            Ok(conn) => conn,
            Err(e) => return Err(self.dropped(1, e)),
        };
        let script = &scripts::health().record_outcome;
        let mut call = script.key(self.inner.keys.health(channel.as_str()));
        self.push_args(&mut call, counts);
        let started = Instant::now();
        let mut result = call.invoke_async::<i64>(&mut conn).await;
        if let Err(e) = &result {
            // Both retries are safe: a refused connection reached nothing (after an outage
            // the connection reports the failed reconnect once), and NOSCRIPT ran nothing
            // (the script was flushed again between its reload and the call).
            if e.is_connection_refusal() || e.kind() == ErrorKind::NoScriptError {
                result = call.invoke_async::<i64>(&mut conn).await;
            }
        }
        match result {
            Ok(minute) => {
                self.observe(SCRIPT, started);
                self.answered();
                self.counted(std::slice::from_ref(counts));
                Ok(minute)
            }
            Err(e) => Err(self.dropped(1, e)),
        }
    }

    /// Reports for several channels (or several reports of one) in one pipelined round trip
    /// of one `EVALSHA` each (more only when Redis had lost the script: `SCRIPT LOAD`, then
    /// the reports that met `NOSCRIPT` again).
    /// Returns each report's minute, in order. At most [`MAX_REPORTS_PER_CALL`] reports;
    /// more, or any counts that break a rule (named `reports[<i>].<field>`), are refused
    /// before anything is sent.
    ///
    /// On an error the reports Redis took stay recorded; the others are dropped and
    /// counted as such (when the connection broke, all are counted as dropped: which ones
    /// ran cannot be known).
    #[tracing::instrument(skip_all, fields(reports = reports.len()), err(level = "debug"))]
    pub async fn record_many(&self, reports: &[(ChannelCode, OutcomeCounts)]) -> Result<Vec<i64>, OutcomeError> {
        if reports.len() > MAX_REPORTS_PER_CALL {
            return Err(OutcomeError::Invalid(InvalidInput::new(
                "reports",
                format!("at most {MAX_REPORTS_PER_CALL} per call, got {}", reports.len()),
            )));
        }
        for (i, (_, counts)) in reports.iter().enumerate() {
            counts.validate().map_err(|e| InvalidInput::new(format!("reports[{i}].{}", e.field), e.rule))?;
        }
        if reports.is_empty() {
            return Ok(Vec::new());
        }
        if self.inner.breaker.is_open() {
            return Err(self.dropped(reports.len(), Breaker::skipped_error()));
        }
        let mut conn = match self.inner.redis.connection().await {
            Ok(conn) => conn,
            Err(e) => return Err(self.dropped(reports.len(), e)),
        };
        let script = &scripts::health().record_outcome;
        let mut minutes: Vec<Option<i64>> = vec![None; reports.len()];
        let mut pending: Vec<usize> = (0..reports.len()).collect();
        let started = Instant::now();
        let mut failure = None;
        // Later passes only re-send what met NOSCRIPT (which ran nothing).
        for pass in 0..3 {
            if pass > 0 {
                if let Err(e) = script.load_async(&mut conn).await {
                    failure = Some(e);
                    break;
                }
            }
            let commands = pending
                .iter()
                .map(|&i| {
                    let (channel, counts) = &reports[i];
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(script.get_hash()).arg(1).arg(self.inner.keys.health(channel.as_str()));
                    for a in self.args(counts) {
                        cmd.arg(a);
                    }
                    cmd
                })
                .collect();
            // One pipeline on one server; on a cluster the channels' keys spread over nodes.
            let replies = match conn.send_each(commands).await {
                Ok(replies) => replies,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if replies.len() != pending.len() {
                let detail = format!("{} replies to {} commands", replies.len(), pending.len());
                return Err(OutcomeError::Protocol { script: SCRIPT, detail });
            }
            let mut lost_script = Vec::new();
            for (&i, reply) in pending.iter().zip(replies) {
                let reply = reply.and_then(redis::from_owned_redis_value::<i64>);
                match reply {
                    Ok(minute) => minutes[i] = Some(minute),
                    Err(e) if e.kind() == ErrorKind::NoScriptError => lost_script.push(i),
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            pending = lost_script;
            if pending.is_empty() || failure.is_some() {
                break;
            }
        }
        let taken: Vec<OutcomeCounts> =
            reports.iter().zip(&minutes).filter(|(_, m)| m.is_some()).map(|((_, c), _)| *c).collect();
        self.counted(&taken);
        if let Some(e) = failure {
            return Err(self.dropped(reports.len() - taken.len(), e));
        }
        if !pending.is_empty() {
            // NOSCRIPT again right after SCRIPT LOAD: another client keeps flushing scripts.
            let e = redis::RedisError::from((ErrorKind::NoScriptError, "script missing right after SCRIPT LOAD"));
            return Err(self.dropped(pending.len(), e));
        }
        self.observe("record_outcome_batch", started);
        self.answered();
        // Every report has its minute here (no failure, nothing pending); no panic either way.
        minutes
            .into_iter()
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| OutcomeError::Protocol { script: SCRIPT, detail: "a report without a reply".into() })
    }

    /// The minutes `from_minute..=to_minute` (inclusive) of a channel, in order. Minutes
    /// without any report are **omitted** (so are minutes already expired or pruned); an
    /// empty range (`from_minute > to_minute`) is empty without asking Redis. One `HGETALL`.
    #[tracing::instrument(skip_all, fields(channel = %channel, from_minute, to_minute), err)]
    pub async fn window(
        &self,
        channel: &ChannelCode,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<MinuteCounts>, OutcomeError> {
        if from_minute > to_minute {
            return Ok(Vec::new());
        }
        let mut conn = self.read_connection().await?;
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.inner.keys.health(channel.as_str()))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.read_error(e))?;
        self.answered();
        let mut minutes: BTreeMap<i64, MinuteCounts> = BTreeMap::new();
        for (field, value) in fields {
            let Some((minute, kind)) = parse_field(&field) else { continue };
            if minute < from_minute || minute > to_minute {
                continue;
            }
            let n: u64 = value.parse().map_err(|_| OutcomeError::Protocol {
                script: "HGETALL",
                detail: format!("field {field:?} of channel {channel} holds {value:?}, not a count"),
            })?;
            let m = minutes.entry(minute).or_insert(MinuteCounts { minute, ..Default::default() });
            match kind {
                Field::Ok => m.ok = n,
                Field::Fail => m.fail = n,
                Field::LatencyMs => m.latency_ms_sum = n,
                Field::LatencyN => m.latency_count = n,
            }
        }
        Ok(minutes.into_values().collect())
    }

    /// Removes a channel's minutes before `before_minute` (`HKEYS` + `HDEL`). Returns how
    /// many fields were removed (up to four per minute). Fields that are not outcome
    /// counters are left alone.
    #[tracing::instrument(skip_all, fields(channel = %channel, before_minute), err)]
    pub async fn prune(&self, channel: &ChannelCode, before_minute: i64) -> Result<u64, OutcomeError> {
        let key = self.inner.keys.health(channel.as_str());
        let mut conn = self.read_connection().await?;
        let fields: Vec<String> =
            redis::cmd("HKEYS").arg(&key).query_async(&mut conn).await.map_err(|e| self.read_error(e))?;
        let old: Vec<&String> =
            fields.iter().filter(|f| parse_field(f).is_some_and(|(minute, _)| minute < before_minute)).collect();
        if old.is_empty() {
            self.answered();
            return Ok(0);
        }
        let removed: u64 =
            redis::cmd("HDEL").arg(&key).arg(&old).query_async(&mut conn).await.map_err(|e| self.read_error(e))?;
        self.answered();
        Ok(removed)
    }

    /// The current unix minute by this client's clock (Redis `TIME`, or the hand-set
    /// clock): the minute a report sent now is counted in.
    pub async fn now_minute(&self) -> Result<i64, OutcomeError> {
        if let Clock::Manual(_) = self.inner.clock {
            return Ok(self.inner.clock.guess().timestamp_millis().div_euclid(60_000));
        }
        let mut conn = self.read_connection().await?;
        let (secs, _micros): (i64, i64) =
            redis::cmd("TIME").query_async(&mut conn).await.map_err(|e| self.read_error(e))?;
        self.answered();
        Ok(secs.div_euclid(60))
    }

    fn args(&self, counts: &OutcomeCounts) -> [String; 6] {
        [
            self.inner.clock.script_arg(),
            counts.ok.to_string(),
            counts.fail.to_string(),
            counts.latency_ms_sum.to_string(),
            counts.latency_count.to_string(),
            RETENTION.as_secs().to_string(),
        ]
    }

    fn push_args(&self, call: &mut ScriptInvocation<'_>, counts: &OutcomeCounts) {
        for a in self.args(counts) {
            call.arg(a);
        }
    }

    async fn read_connection(&self) -> Result<crate::RedisConnection, OutcomeError> {
        if self.inner.breaker.is_open() {
            return Err(OutcomeError::Unavailable(Breaker::skipped_error()));
        }
        self.inner.redis.connection().await.map_err(|e| self.read_error(e))
    }

    fn read_error(&self, e: redis::RedisError) -> OutcomeError {
        if is_unreachable(&e) {
            self.went_down(&e);
            OutcomeError::Unavailable(e)
        } else {
            OutcomeError::Redis(e)
        }
    }

    /// Counts `n` reports as dropped and says why.
    fn dropped(&self, n: usize, e: redis::RedisError) -> OutcomeError {
        let unreachable = is_unreachable(&e);
        if let Some(m) = &self.inner.metrics {
            let reason = if unreachable { "unreachable" } else { "error" };
            m.dropped.with_label_values(&[reason]).inc_by(n as u64);
        }
        if unreachable {
            self.went_down(&e);
            OutcomeError::Unavailable(e)
        } else {
            tracing::warn!(error = %e, reports = n, "redis refused outcome reports; dropped");
            OutcomeError::Redis(e)
        }
    }

    fn went_down(&self, e: &redis::RedisError) {
        self.inner.breaker.trip();
        if !self.inner.redis_down.swap(true, Ordering::AcqRel) {
            tracing::warn!(error = %e, "redis unreachable: outcome reports are dropped until it answers");
        }
    }

    fn answered(&self) {
        self.inner.breaker.reset();
        if self.inner.redis_down.swap(false, Ordering::AcqRel) {
            tracing::info!("redis answers again: outcome reports are recorded");
        }
    }

    fn counted(&self, reports: &[OutcomeCounts]) {
        if let Some(m) = &self.inner.metrics {
            let (ok, fail) = reports.iter().fold((0, 0), |(ok, fail), c| (ok + c.ok, fail + c.fail));
            if ok > 0 {
                m.recorded.with_label_values(&["ok"]).inc_by(ok);
            }
            if fail > 0 {
                m.recorded.with_label_values(&["fail"]).inc_by(fail);
            }
        }
    }

    fn observe(&self, script: &str, started: Instant) {
        if let Some(m) = &self.inner.metrics {
            m.script_seconds.with_label_values(&[script]).observe(started.elapsed().as_secs_f64());
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Ok,
    Fail,
    LatencyMs,
    LatencyN,
}

/// `<minute>:<ok|fail|lat_ms|lat_n>`; anything else is not an outcome counter.
fn parse_field(field: &str) -> Option<(i64, Field)> {
    let (minute, kind) = field.split_once(':')?;
    let kind = match kind {
        "ok" => Field::Ok,
        "fail" => Field::Fail,
        "lat_ms" => Field::LatencyMs,
        "lat_n" => Field::LatencyN,
        _ => return None,
    };
    Some((minute.parse().ok()?, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_code_is_refused_naming_the_field_channel() {
        assert_eq!(ChannelCode::parse("ALIPAY_A.v2-x").unwrap().as_str(), "ALIPAY_A.v2-x");
        for bad in ["", "a{b", "a:b", "a b", &"x".repeat(65)] {
            assert_eq!(ChannelCode::parse(bad).unwrap_err().field, "channel", "{bad:?}");
        }
        assert!(ChannelCode::parse(&"x".repeat(64)).is_ok());
    }

    #[test]
    fn counts_break_their_rules_by_field() {
        let field = |r: Result<OutcomeCounts, InvalidInput>| r.unwrap_err().field;
        assert_eq!(field(OutcomeCounts::new(0, 0, 0, 0)), "ok");
        assert_eq!(field(OutcomeCounts::new(0, 0, 5, 1)), "ok");
        assert_eq!(field(OutcomeCounts::new(MAX_CALLS + 1, 0, 0, 0)), "ok");
        assert_eq!(field(OutcomeCounts::new(1, MAX_CALLS + 1, 0, 0)), "fail");
        assert_eq!(field(OutcomeCounts::new(1, 0, MAX_COUNT + 1, 1)), "latency_ms_sum");
        assert_eq!(field(OutcomeCounts::new(MAX_CALLS, MAX_CALLS, 10, MAX_CALLS + 1)), "latency_count");
        assert_eq!(field(OutcomeCounts::new(1, 1, 10, 3)), "latency_count");
        assert_eq!(field(OutcomeCounts::new(1, 1, 10, 0)), "latency_count");
        assert!(OutcomeCounts::new(MAX_CALLS, MAX_CALLS, MAX_COUNT, MAX_CALLS).is_ok());
        assert!(OutcomeCounts::new(0, 1, 0, 1).is_ok());
    }

    #[test]
    fn counts_deserialize_through_their_rules() {
        let c: OutcomeCounts = serde_json::from_str(r#"{"ok":3,"fail":1}"#).unwrap();
        assert_eq!(c, OutcomeCounts { ok: 3, fail: 1, latency_ms_sum: 0, latency_count: 0 });
        let e = serde_json::from_str::<OutcomeCounts>(r#"{"ok":1,"fail":0,"latency_ms_sum":9,"latency_count":2}"#);
        assert!(e.unwrap_err().to_string().starts_with("latency_count: "));
        assert!(serde_json::from_str::<OutcomeCounts>(r#"{"ok":1,"fail":0,"extra":1}"#).is_err());
    }

    #[test]
    fn one_call_counts_its_latency_in_whole_milliseconds() {
        let c = OutcomeCounts::one(false, Some(Duration::from_micros(12_900)));
        assert_eq!(c, OutcomeCounts { ok: 0, fail: 1, latency_ms_sum: 12, latency_count: 1 });
        let c = OutcomeCounts::one(true, Some(Duration::from_secs(u64::MAX)));
        assert_eq!(c.latency_ms_sum, MAX_COUNT);
        assert_eq!(OutcomeCounts::one(true, None).latency_count, 0);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn totals_give_the_failure_ratio_and_mean_latency() {
        let m = |minute, ok, fail, ms, n| MinuteCounts { minute, ok, fail, latency_ms_sum: ms, latency_count: n };
        let t = Totals::of(&[m(1, 3, 1, 40, 4), m(2, 4, 2, 60, 2)]);
        assert_eq!(t.outcomes(), 10);
        assert_eq!(t.failure_ratio(), Some(0.3));
        assert_eq!(t.mean_latency_ms(), Some(100.0 / 6.0));
        assert_eq!(Totals::default().failure_ratio(), None);
        assert_eq!(parse_field("-5:lat_n"), Some((-5, Field::LatencyN)));
        assert_eq!(parse_field("5:state"), None);
    }
}
