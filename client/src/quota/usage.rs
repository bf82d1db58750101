//! The usage stream: every settle, release and expiry is appended by the script that
//! changed the counters to the tenant's stream (`quota:{tenant}:usage`), which the leader
//! drains into the Postgres usage ledger through a consumer group, acknowledging after the
//! commit. This module reads and acknowledges the stream, keeps this process's own settle
//! records until the ledger holds them (a Redis that restarted empty lost its stream's
//! tail), charges a ledger row the counters may not hold, and publishes a tenant's
//! snapshot with its counters restored from the ledger first.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use redis::Value;
use serde::Serialize;

use super::call::CallError;
use super::{parts, Part, QuotaError, Quotas, TenantId, TenantQuota};
use crate::clock::Period;
use crate::reply::Fields;
use crate::scripts;

/// The consumer group that drains every tenant's usage stream.
pub const USAGE_GROUP: &str = "ledger";
/// The consumer name of the drain (one leader at a time; a successor takes over what its
/// predecessor read and did not acknowledge).
const USAGE_CONSUMER: &str = "drain";
/// The most settle records a process keeps waiting for the ledger; beyond it the oldest
/// are dropped with an error (the stream and the compensation still hold them).
pub const MAX_UNCONFIRMED: usize = 1_000_000;

/// How a reservation finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageOutcome {
    Settled,
    Released,
    /// Returned by the sweeper after its deadline.
    Expired,
}

impl UsageOutcome {
    /// The name in the stream and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::Released => "released",
            Self::Expired => "expired",
        }
    }

    /// Parses the name.
    pub fn parse(raw: &str) -> Option<Self> {
        Some(match raw {
            "settled" => Self::Settled,
            "released" => Self::Released,
            "expired" => Self::Expired,
            _ => return None,
        })
    }
}

/// One finished reservation, as the script that finished it recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRecord {
    pub tenant: TenantId,
    pub request_id: String,
    pub outcome: UsageOutcome,
    /// Settled after its reservation expired or was lost.
    pub late: bool,
    pub reserved: u64,
    /// Tokens used (settles only).
    pub actual: Option<u64>,
    /// What each bucket paid (the plan in all periods together).
    pub charged: Vec<Part>,
    /// The plan's part per period (`YYYY-MM`), when a settle crossed the month's turn.
    pub plan_periods: Vec<(String, u64)>,
    /// When the reservation was made and when it finished (ms since the epoch, Redis clock).
    pub reserved_at_ms: i64,
    pub at_ms: i64,
    /// The generation of the counters that hold this record.
    pub generation: String,
    /// The model the request was for, when its reservation said.
    pub model: Option<String>,
    /// What the reservation took from each bucket, in paying order (empty when there was
    /// no reservation, or for a record written before reservations' parts were kept).
    pub reserved_parts: Vec<Part>,
    /// The reservation's deadline (ms since the epoch, Redis clock), when it had one.
    pub deadline_ms: Option<i64>,
    /// The stream entry id, for a record read from the stream.
    pub entry: Option<String>,
}

impl UsageRecord {
    /// Tokens charged to grants, `grant:amount,...` (the plan is in `plan_periods`).
    fn grant_parts(&self) -> String {
        self.charged
            .iter()
            .filter(|p| p.bucket != "plan")
            .map(|p| format!("{}:{}", p.bucket, p.tokens))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn plan_text(&self) -> String {
        self.plan_periods.iter().map(|(p, n)| format!("{p}:{n}")).collect::<Vec<_>>().join(",")
    }

    /// The UTC day the reservation was made, `YYYY-MM-DD`.
    pub fn reserved_day(&self) -> String {
        chrono::DateTime::from_timestamp_millis(self.reserved_at_ms)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default()
    }
}

/// A tenant's counters rebuilt from the usage ledger: what the ledger's rows up to `upto`
/// add up to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Restore {
    /// The last ledger row included (rows after it are charged when they arrive).
    pub upto: i64,
    /// Tokens used per grant id.
    pub grant_used: BTreeMap<String, u64>,
    /// Plan tokens used per period (`YYYY-MM`).
    pub plan_used: BTreeMap<String, u64>,
    /// Requests admitted per day (`YYYY-MM-DD`).
    pub requests: BTreeMap<String, u64>,
}

/// What publishing a tenant's snapshot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Nothing written: the tenant has no counters in this Redis; publish again with a
    /// [`Restore`] from the ledger.
    NeedsRestore,
    /// Whether the snapshot was written, and the version Redis holds.
    Done { written: bool, version: u64 },
}

/// What charging a ledger row to the counters did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// The counters are not restored yet (the restore will include the row).
    Missing,
    /// The counters already hold it.
    Counted,
    /// Charged now.
    Applied,
}

/// Settle records waiting for the ledger, oldest first.
#[derive(Default)]
pub(super) struct Unconfirmed {
    records: VecDeque<(Instant, UsageRecord)>,
}

impl Quotas {
    /// Keeps a settle's record until the ledger holds it.
    pub(super) fn keep_record(&self, record: UsageRecord) {
        let mut kept = self.inner.unconfirmed.lock().expect("unconfirmed lock");
        if kept.records.len() >= MAX_UNCONFIRMED {
            kept.records.pop_front();
            tracing::error!("more than {MAX_UNCONFIRMED} settle records wait for the ledger: dropped the oldest");
        }
        kept.records.push_back((Instant::now(), record));
    }

    /// Takes the settle records kept for at least `age` (the drain had that long to write
    /// them); give back with [`Quotas::give_back_records`] those the ledger could not take.
    pub fn take_records(&self, age: Duration) -> Vec<UsageRecord> {
        let mut kept = self.inner.unconfirmed.lock().expect("unconfirmed lock");
        let mut out = Vec::new();
        while kept.records.front().is_some_and(|(at, _)| at.elapsed() >= age) {
            out.push(kept.records.pop_front().expect("front").1);
        }
        out
    }

    /// Returns records taken by [`Quotas::take_records`] (the ledger was unavailable).
    pub fn give_back_records(&self, records: Vec<UsageRecord>) {
        let mut kept = self.inner.unconfirmed.lock().expect("unconfirmed lock");
        for r in records.into_iter().rev() {
            kept.records.push_front((Instant::now(), r));
        }
    }

    /// How many settle records wait for the ledger.
    pub fn records_waiting(&self) -> usize {
        self.inner.unconfirmed.lock().expect("unconfirmed lock").records.len()
    }

    /// Reads up to `count` records per tenant from the tenants' usage streams: first those
    /// read before and not acknowledged (a failed commit, a previous leader), then new ones.
    pub async fn read_usage(&self, tenants: &[TenantId], count: usize) -> Result<Vec<UsageRecord>, QuotaError> {
        let mut out = Vec::new();
        for chunk in tenants.chunks(100) {
            self.ensure_groups(chunk).await?;
            for start in ["0", ">"] {
                let reply = match self.xreadgroup(chunk, count, start).await {
                    Err(e) if e.code() == Some("NOGROUP") => {
                        // The stream was lost (Redis restarted empty) since the group was made.
                        self.inner.usage_groups.lock().expect("groups lock").clear();
                        self.ensure_groups(chunk).await?;
                        self.xreadgroup(chunk, count, start).await
                    }
                    other => other,
                }
                .map_err(QuotaError::Redis)?;
                for reply in &reply {
                    out.extend(self.parse_streams(reply)?);
                }
            }
        }
        out.sort_by(|a, b| (&a.tenant, &a.entry).cmp(&(&b.tenant, &b.entry)));
        out.dedup_by(|a, b| a.tenant == b.tenant && a.entry == b.entry);
        Ok(out)
    }

    async fn ensure_groups(&self, tenants: &[TenantId]) -> Result<(), QuotaError> {
        let missing: Vec<&TenantId> = {
            let known = self.inner.usage_groups.lock().expect("groups lock");
            tenants.iter().filter(|t| !known.contains(*t)).collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let commands = missing
            .iter()
            .map(|t| {
                redis::cmd("XGROUP")
                    .arg("CREATE")
                    .arg(self.inner.keys.quota_usage(t.as_str()))
                    .arg(USAGE_GROUP)
                    .arg("0")
                    .arg("MKSTREAM")
                    .to_owned()
            })
            .collect();
        // BUSYGROUP (the group exists) is the usual answer: each reply is looked at alone.
        for reply in conn.send_each(commands).await.map_err(QuotaError::Redis)? {
            if let Err(e) = reply {
                if e.code() != Some("BUSYGROUP") {
                    return Err(QuotaError::Redis(e));
                }
            }
        }
        self.inner.usage_groups.lock().expect("groups lock").extend(missing.into_iter().cloned());
        Ok(())
    }

    /// One `XREADGROUP` per tenant (the streams of several tenants lie in several slots of a
    /// cluster, which one command cannot span): the replies in order, or the first error.
    async fn xreadgroup(&self, tenants: &[TenantId], count: usize, start: &str) -> redis::RedisResult<Vec<Value>> {
        let mut conn = self.inner.redis.connection().await?;
        let commands = tenants
            .iter()
            .map(|t| {
                redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg(USAGE_GROUP)
                    .arg(USAGE_CONSUMER)
                    .arg("COUNT")
                    .arg(count.max(1))
                    .arg("STREAMS")
                    .arg(self.inner.keys.quota_usage(t.as_str()))
                    .arg(start)
                    .to_owned()
            })
            .collect();
        conn.send_each(commands).await?.into_iter().collect()
    }

    fn parse_streams(&self, reply: &Value) -> Result<Vec<UsageRecord>, QuotaError> {
        let bad = |detail: &str| QuotaError::Protocol { script: "XREADGROUP", detail: detail.to_owned() };
        let streams: Vec<(&Value, &Value)> = match reply {
            Value::Nil => return Ok(Vec::new()),
            Value::Array(streams) => streams
                .iter()
                .map(|s| match s {
                    Value::Array(kv) if kv.len() == 2 => Ok((&kv[0], &kv[1])),
                    _ => Err(bad("stream not a [key, entries] pair")),
                })
                .collect::<Result<_, _>>()?,
            Value::Map(streams) => streams.iter().map(|(k, v)| (k, v)).collect(),
            _ => return Err(bad("not an array of streams")),
        };
        let mut out = Vec::new();
        for (key, entries) in streams {
            let key = text(key).ok_or_else(|| bad("stream key not text"))?;
            let tenant = self
                .inner
                .keys
                .tenant_of_quota_key(key)
                .and_then(|t| TenantId::parse(t).ok())
                .ok_or_else(|| bad("stream key names no tenant"))?;
            let Value::Array(entries) = entries else { return Err(bad("entries not an array")) };
            for entry in entries {
                let Value::Array(pair) = entry else { return Err(bad("entry not an array")) };
                let (Some(id), Some(fields)) = (pair.first(), pair.get(1)) else { return Err(bad("entry not a pair")) };
                let id = text(id).ok_or_else(|| bad("entry id not text"))?;
                // An entry read before and deleted since answers with no fields: skip it.
                let Value::Array(fields) = fields else { continue };
                let mut map = HashMap::new();
                for kv in fields.chunks(2) {
                    if let [k, v] = kv {
                        map.insert(text(k).unwrap_or_default(), text(v).unwrap_or_default());
                    }
                }
                out.push(record_of(&tenant, Some(id.to_owned()), &map).map_err(|d| bad(&d))?);
            }
        }
        Ok(out)
    }

    /// Acknowledges records read from the stream (after the ledger committed them) and
    /// removes them from it.
    pub async fn ack_usage(&self, records: &[UsageRecord]) -> Result<(), QuotaError> {
        let mut by_tenant: BTreeMap<&TenantId, Vec<&str>> = BTreeMap::new();
        for r in records {
            if let Some(id) = &r.entry {
                by_tenant.entry(&r.tenant).or_default().push(id);
            }
        }
        if by_tenant.is_empty() {
            return Ok(());
        }
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let mut commands = Vec::new();
        for (tenant, ids) in by_tenant {
            let key = self.inner.keys.quota_usage(tenant.as_str());
            commands.push(redis::cmd("XACK").arg(&key).arg(USAGE_GROUP).arg(&ids).to_owned());
            commands.push(redis::cmd("XDEL").arg(&key).arg(&ids).to_owned());
        }
        for reply in conn.send_each(commands).await.map_err(QuotaError::Redis)? {
            reply.map_err(QuotaError::Redis)?;
        }
        Ok(())
    }

    /// The generation of each tenant's counters in Redis (`None`: it has none).
    pub async fn generations(&self, tenants: &[TenantId]) -> Result<HashMap<TenantId, Option<String>>, QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let commands = tenants
            .iter()
            .map(|t| redis::cmd("HGET").arg(self.inner.keys.quota_state(t.as_str())).arg("gen").to_owned());
        let mut gens = HashMap::new();
        for (t, reply) in tenants.iter().zip(conn.send_each(commands.collect()).await.map_err(QuotaError::Redis)?) {
            let generation: Option<String> =
                reply.and_then(redis::from_owned_redis_value).map_err(QuotaError::Redis)?;
            gens.insert(t.clone(), generation);
        }
        Ok(gens)
    }

    /// How many records a tenant's stream holds (not yet drained).
    pub async fn usage_backlog(&self, tenant: &TenantId) -> Result<u64, QuotaError> {
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        redis::cmd("XLEN")
            .arg(self.inner.keys.quota_usage(tenant.as_str()))
            .query_async(&mut conn)
            .await
            .map_err(QuotaError::Redis)
    }

    /// Charges ledger row `row` (written from `record`) to the counters unless they hold it
    /// (its done marker is there, it was counted in this generation, or the restore
    /// included it). `from_instance`: the record is the settling instance's own copy, so
    /// the same generation does not prove the counters hold it (only its done marker does).
    pub async fn apply_usage(
        &self,
        row: i64,
        record: &UsageRecord,
        count_request: bool,
        from_instance: bool,
    ) -> Result<Applied, QuotaError> {
        let extra = vec![
            row.to_string(),
            record.generation.clone(),
            record.grant_parts(),
            record.plan_text(),
            if count_request { record.reserved_day() } else { String::new() },
            record.request_id.clone(),
            if from_instance { "1" } else { "0" }.to_owned(),
            record.at_ms.to_string(),
        ];
        let reply = self
            .call("apply_usage", &scripts::quota().apply_usage, &record.tenant, &extra)
            .await
            .map_err(CallError::into_quota_error)?;
        let f = Fields::new("apply_usage", &reply);
        Ok(match f.str(0)? {
            "missing" => Applied::Missing,
            "counted" => Applied::Counted,
            "applied" => Applied::Applied,
            other => return Err(f.unexpected(other).into()),
        })
    }

    /// Installs a tenant's snapshot unless Redis holds one as new or newer, restoring the
    /// tenant's counters first when this Redis has none (`restore`; `None` asks, answering
    /// [`Published::NeedsRestore`]).
    #[tracing::instrument(skip_all, fields(tenant = %tenant, version = quota.version), err)]
    pub async fn publish_restoring(
        &self,
        tenant: &TenantId,
        quota: &TenantQuota,
        restore: Option<&Restore>,
    ) -> Result<Published, QuotaError> {
        if let Err(invalid) = quota.validate() {
            return Err(QuotaError::Protocol { script: "publish_tenant", detail: invalid.to_string() });
        }
        let restore_json = match restore {
            None => String::new(),
            Some(r) => self.restore_json(r, quota),
        };
        let keys = &self.inner.keys;
        let t = tenant.as_str();
        let period = Period::of(self.inner.clock.guess());
        let mut conn = self.inner.redis.connection().await.map_err(QuotaError::Redis)?;
        let mut call = scripts::quota().publish_tenant.key(keys.quota_meta(t));
        call.key(keys.quota_state(t))
            .key(keys.quota_period(t, &period.to_string()))
            .key(keys.quota_period(t, &period.previous().to_string()))
            .arg(quota.version)
            .arg(super::unique_id())
            .arg(restore_json);
        for (field, value) in quota.meta_fields() {
            call.arg(field).arg(value);
        }
        let reply: Value = call.invoke_async(&mut conn).await.map_err(QuotaError::Redis)?;
        let Value::Array(items) = reply else {
            return Err(QuotaError::Protocol { script: "publish_tenant", detail: "not an array".into() });
        };
        let f = Fields::new("publish_tenant", &items);
        if f.str(0).ok() == Some("restore") {
            return Ok(Published::NeedsRestore);
        }
        Ok(Published::Done { written: f.int(0)? == 1, version: f.uint(1)? })
    }

    fn restore_json(&self, r: &Restore, quota: &TenantQuota) -> String {
        let now = self.inner.clock.guess();
        let period = Period::of(now);
        let (current, previous) = (period.to_string(), period.previous().to_string());
        let mut current_fields = serde_json::Map::new();
        let mut previous_fields = serde_json::Map::new();
        if let Some(n) = r.plan_used.get(&current) {
            current_fields.insert("plan_used".into(), (*n).into());
        }
        if let Some(n) = r.plan_used.get(&previous) {
            previous_fields.insert("plan_used".into(), (*n).into());
        }
        for (day, n) in &r.requests {
            if day.starts_with(&current) {
                current_fields.insert(format!("req:{day}"), (*n).into());
            }
        }
        let state: serde_json::Map<String, serde_json::Value> =
            r.grant_used.iter().map(|(g, n)| (format!("u:{g}"), (*n).into())).collect();
        let retention = i64::from(quota.retention_days) * 86_400_000;
        serde_json::json!({
            "upto": r.upto,
            "state": state,
            "current": current_fields,
            "previous": previous_fields,
            "current_expires_ms": period.next_start_ms() + retention,
            "previous_expires_ms": period.start_ms() + retention,
            "at": now.timestamp_millis(),
        })
        .to_string()
    }
}

fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

fn record_of(tenant: &TenantId, entry: Option<String>, m: &HashMap<&str, &str>) -> Result<UsageRecord, String> {
    let field = |name: &str| m.get(name).copied().ok_or_else(|| format!("usage record without {name}"));
    let number = |name: &str| -> Result<i64, String> {
        field(name)?.parse().map_err(|_| format!("usage record {name} not an integer"))
    };
    let outcome = UsageOutcome::parse(field("outcome")?).ok_or("usage record with an unknown outcome")?;
    let actual = field("actual")?;
    let charged_value = Value::BulkString(field("charged")?.as_bytes().to_vec());
    let charged = parts(&Fields::new("usage record", std::slice::from_ref(&charged_value)), 0).map_err(|e| e.detail)?;
    let parts_value = Value::BulkString(m.get("parts").copied().unwrap_or_default().as_bytes().to_vec());
    let reserved_parts =
        parts(&Fields::new("usage record", std::slice::from_ref(&parts_value)), 0).map_err(|e| e.detail)?;
    let mut plan_periods = Vec::new();
    for p in field("plans")?.split(',').filter(|s| !s.is_empty()) {
        let (period, n) = p.split_once(':').ok_or("plan part without ':'")?;
        plan_periods.push((period.to_owned(), n.parse().map_err(|_| "plan part amount not an integer")?));
    }
    Ok(UsageRecord {
        tenant: tenant.clone(),
        request_id: field("rid")?.to_owned(),
        outcome,
        late: field("late")? == "1",
        reserved: number("reserved")? as u64,
        actual: if actual.is_empty() { None } else { Some(number("actual")? as u64) },
        charged,
        plan_periods,
        reserved_at_ms: number("reserved_at")?,
        at_ms: number("at")?,
        generation: field("gen")?.to_owned(),
        model: m.get("model").filter(|s| !s.is_empty()).map(|s| (*s).to_owned()),
        reserved_parts,
        deadline_ms: match m.get("deadline").filter(|s| !s.is_empty()) {
            Some(d) => Some(d.parse().map_err(|_| "usage record deadline not an integer")?),
            None => None,
        },
        entry,
    })
}

/// The record of a settle from its reply fields 7.. (`plans, reserved_at, at, gen, model,
/// parts, deadline`; a reply of a script from before parts were kept ends after the model).
pub(super) fn settle_record(
    tenant: &TenantId,
    request: &str,
    reserved: u64,
    actual: u64,
    late: bool,
    charged: &[Part],
    f: &Fields<'_>,
) -> Result<UsageRecord, crate::reply::ReplyError> {
    let mut plan_periods = Vec::new();
    for p in f.str(7)?.split(',').filter(|s| !s.is_empty()) {
        let (period, n) = p.split_once(':').ok_or_else(|| f.bad(7, "plan part without ':'"))?;
        plan_periods.push((period.to_owned(), n.parse().map_err(|_| f.bad(7, "plan part amount not an integer"))?));
    }
    Ok(UsageRecord {
        tenant: tenant.clone(),
        request_id: request.to_owned(),
        outcome: UsageOutcome::Settled,
        late,
        reserved,
        actual: Some(actual),
        charged: charged.to_vec(),
        plan_periods,
        reserved_at_ms: f.int(8)?,
        at_ms: f.int(9)?,
        generation: f.str(10)?.to_owned(),
        model: f.str(11).ok().filter(|s| !s.is_empty()).map(str::to_owned),
        reserved_parts: if f.str(12).is_ok() { parts(f, 12)? } else { Vec::new() },
        deadline_ms: f.str(13).ok().filter(|s| !s.is_empty()).map(|_| f.int(13)).transpose()?,
        entry: None,
    })
}
