//! What the admin UI's server functions call: [`app::api::Backend`] implemented by the
//! application state, over the same service functions as the REST API.

use app::api::BackendError;
use app::api::TenantView;
use app::api::{
    AuditQuery, AuditRecord, AuditRecords, ChainStatus, ChannelPoolHealth, ChannelView, MemberView, PeakWindowView,
    PoolDetail, SessionInfo, SystemStatus, WeightEntry,
};
use app::api::{TokenView, UserView};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

use crate::access::{Permission, Principal, Role, Via};
use crate::audit::store::{list_audit, try_verify_audit, AuditFilter};
use crate::state::AppState;

mod lists;
mod routes;
mod samples;
mod tenants;

pub use tenants::UiCache;

/// What the UI's server functions run on: the state every handler shares, and what the
/// admin UI keeps between requests (its own, so `state` names nothing of the UI's).
#[derive(Clone)]
pub struct UiBackend {
    state: AppState,
    cache: std::sync::Arc<UiCache>,
}

impl UiBackend {
    pub fn new(state: AppState) -> Self {
        Self { state, cache: Default::default() }
    }
}

impl std::ops::Deref for UiBackend {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.state
    }
}

#[async_trait::async_trait]
impl app::api::Backend for UiBackend {
    async fn system_status(&self) -> SystemStatus {
        crate::probes::check(self).await
    }

    async fn whoami(&self, session_cookie: Option<String>) -> Result<Option<SessionInfo>, BackendError> {
        let principal = if self.auth.open {
            Some(Principal { name: "open-mode".into(), via: Via::Open })
        } else if let Some(id) = session_cookie {
            crate::access::session(&self.db, &id, self.auth.idle_ttl).await.map_err(unavailable)?
        } else {
            None
        };
        Ok(principal.map(|p| {
            let (role, csrf_token) = match &p.via {
                Via::Session { role, csrf } => (*role, csrf.clone()),
                _ => (Role::Admin, String::new()),
            };
            SessionInfo {
                may_export_audit: p.may(Permission::AuditExport),
                may_edit: p.may(Permission::Edit),
                may_operate: p.may(Permission::Operate),
                may_halt: p.may(Permission::Halt),
                may_manage_access: p.may(Permission::ManageAccess),
                user: p.name,
                role: role.to_string(),
                csrf_token,
            }
        }))
    }

    async fn audit(&self, query: AuditQuery) -> Result<AuditRecords, BackendError> {
        let filter = AuditFilter {
            entity: query.entity,
            actor: query.actor,
            action: query.action,
            from: parse_time("from", query.from.as_deref())?,
            to: parse_time("to", query.to.as_deref())?,
            before_id: query.before_id,
            limit: Some(app::api::audit::AUDIT_PAGE_SIZE),
        };
        if let (Some(from), Some(to)) = (filter.from, filter.to) {
            if to <= from {
                return Err(BackendError::invalid("to", "must be after from"));
            }
        }
        let page = list_audit(&self.db, &filter).await.map_err(unavailable)?;
        let mut encoded = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in [("entity", &filter.entity), ("actor", &filter.actor), ("action", &filter.action)] {
            if let Some(v) = value {
                encoded.append_pair(key, v);
            }
        }
        for (key, value) in [("from", filter.from), ("to", filter.to)] {
            if let Some(t) = value {
                encoded.append_pair(key, &t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            }
        }
        Ok(AuditRecords {
            rows: page
                .rows
                .into_iter()
                .map(|r| AuditRecord {
                    id: r.id,
                    at: r.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                    actor: r.actor,
                    source: r.source,
                    action: r.action,
                    entity: r.entity,
                    reason: r.reason,
                    before: r.before,
                    after: r.after,
                })
                .collect(),
            next: page.next,
            filter_query: encoded.finish(),
        })
    }

    async fn verify_audit(&self) -> Result<ChainStatus, BackendError> {
        let report =
            try_verify_audit(&self.db, false, &self.audit_verify).await.map_err(unavailable)?.ok_or_else(|| {
                BackendError::Unavailable("a check of the audit chain is under way: reload in a few seconds".to_owned())
            })?;
        Ok(ChainStatus {
            intact: report.intact,
            rows: report.rows,
            first_broken: report.first_broken,
            problem: report.problem,
            keyed: report.keyed,
            checked_from: report.checked_from,
        })
    }

    async fn pools(&self, query: app::api::lists::ListQuery) -> Result<app::api::PoolList, BackendError> {
        lists::pools(self, query).await
    }

    async fn pool(&self, name: String) -> Result<Option<PoolDetail>, BackendError> {
        let pool = client::pool::PoolName::parse(&name).map_err(|e| BackendError::invalid("pool", e))?;
        let Some((version, snapshot)) = crate::pools::store::get_pool(&self.db, &pool).await.map_err(unavailable)?
        else {
            return Ok(None);
        };
        let health = crate::health::pool_health(&self.db, &pool).await.map_err(unavailable)?;
        let text = |v: &serde_json::Value, key: &str| v[key].as_str().unwrap_or_default().to_owned();
        let weights = snapshot["weights"]
            .as_array()
            .map(|ws| {
                ws.iter()
                    .map(|w| WeightEntry { member: text(w, "member"), weight: w["weight"].as_u64().unwrap_or(0) })
                    .collect()
            })
            .unwrap_or_default();
        let members = health.map(|h| member_views(&h.members)).unwrap_or_default();
        let peak_windows = snapshot["peak_windows"]
            .as_array()
            .map(|ws| {
                ws.iter()
                    .map(|w| PeakWindowView {
                        start: text(w, "start"),
                        end: text(w, "end"),
                        multiplier: w["multiplier"].as_u64().and_then(|m| u32::try_from(m).ok()).unwrap_or(1),
                        weights: w.get("weights").filter(|v| !v.is_null()).cloned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let caps = snapshot["caps"]
            .as_object()
            .map(|cs| cs.iter().filter_map(|(m, c)| Some((m.clone(), c.as_u64()?))).collect())
            .unwrap_or_default();
        Ok(Some(PoolDetail {
            name: pool.as_str().to_owned(),
            kind: text(&snapshot, "kind"),
            version,
            batch_size: snapshot["batch_size"]
                .as_u64()
                .and_then(|b| u32::try_from(b).ok())
                .unwrap_or(engine::BatchSize::DEFAULT.get()),
            ordering: text(&snapshot, "ordering"),
            timezone: text(&snapshot, "timezone"),
            weights,
            members,
            peak_windows,
            caps,
        }))
    }

    async fn channels(&self, query: app::api::ChannelQuery) -> Result<app::api::ChannelList, BackendError> {
        use app::api::channels::{attention_rank, CHANNEL_PAGE_SIZE, CHANNEL_SORTS};
        let q = lists::search(query.q)?;
        let sort = lists::sort(query.sort, &CHANNEL_SORTS)?;
        let page = lists::page(query.page)?;
        let channels = crate::channels::store::list_channels(&self.db).await.map_err(unavailable)?;
        // Two queries for every channel's health and pin, not two per channel.
        let (members, mut pins) = crate::health::every_member_health(&self.db).await.map_err(unavailable)?;
        let mut by_channel: std::collections::HashMap<String, Vec<ChannelPoolHealth>> =
            std::collections::HashMap::new();
        for m in members {
            by_channel.entry(m.channel).or_default().push(ChannelPoolHealth {
                pool: m.pool,
                state: m.state,
                effective_weight: m.effective_weight,
            });
        }
        let needle = q.to_lowercase();
        let mut rows: Vec<ChannelView> = channels
            .into_iter()
            .filter(|c| lists::holds(&c.code, &needle) || lists::holds(&c.name, &needle))
            .map(|c| ChannelView {
                pin: pins.remove(&c.code),
                pools: by_channel.remove(&c.code).unwrap_or_default(),
                code: c.code,
                name: c.name,
                tier: c.tier,
                enabled: c.enabled,
                base_weight: c.base_weight,
                version: c.version,
            })
            .collect();
        match sort.as_str() {
            "name" => rows.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.code.cmp(&b.code))),
            "weight" => rows.sort_by(|a, b| b.base_weight.cmp(&a.base_weight).then_with(|| a.code.cmp(&b.code))),
            "attention" => rows.sort_by_key(|c| (attention_rank(c), c.code.clone())),
            _ => rows.sort_by(|a, b| a.code.cmp(&b.code)),
        }
        Ok(lists::page_of(rows, page, CHANNEL_PAGE_SIZE, q, sort))
    }

    async fn channel_history(&self, code: String) -> Result<Option<app::api::ChannelDetail>, BackendError> {
        use app::api::{ChannelDetail, DecayPoint, PoolDecay};
        let code = crate::channels::ChannelCode::parse(&code).map_err(|e| BackendError::invalid("channel", e))?;
        let Some(channel) = crate::channels::store::get_channel(&self.db, &code).await.map_err(unavailable)? else {
            return Ok(None);
        };
        let Some(health) = crate::health::channel_health(&self.db, &code).await.map_err(unavailable)? else {
            return Ok(None);
        };
        let mut transitions = crate::health::history(&self.db, &code, 500).await.map_err(unavailable)?;
        transitions.reverse();
        let policies: std::collections::HashMap<String, engine::health::Policy> =
            crate::health::store::policies(&self.db)
                .await
                .map_err(unavailable)?
                .into_iter()
                .map(|(pool, raw)| (pool, crate::health::policy_of(&raw).unwrap_or_default()))
                .collect();
        let outcomes = last_hour_of_outcomes(self, &code).await;
        let pools = health
            .pools
            .iter()
            .map(|p| {
                let base = u64::try_from(p.base_weight).unwrap_or(0);
                let points = transitions
                    .iter()
                    .filter(|t| t.pool == p.pool)
                    .filter_map(|t| {
                        let at = DateTime::parse_from_rfc3339(&t.at).ok()?.with_timezone(&Utc);
                        Some(DecayPoint {
                            weight_before: engine::health::effective_weight(base, t.factor_before, t.from == "ejected"),
                            at: at.format("%Y-%m-%d %H:%M:%S").to_string(),
                            at_ms: at.timestamp_millis(),
                            from: t.from.clone(),
                            effective_weight: engine::health::effective_weight(base, t.factor_after, t.to == "ejected"),
                            to: t.to.clone(),
                            success_rate: t.success_rate,
                            reason: t.reason.clone(),
                        })
                    })
                    .collect();
                let policy = policies.get(&p.pool).cloned().unwrap_or_default();
                PoolDecay {
                    pool: p.pool.clone(),
                    min_success_rate: policy.min_success_rate,
                    min_volume: policy.min_volume,
                    base_weight: base,
                    state: p.state.clone(),
                    effective_weight: p.effective_weight,
                    points,
                }
            })
            .collect();
        Ok(Some(ChannelDetail {
            code: channel.code,
            name: channel.name,
            enabled: channel.enabled,
            pin: health.pin.map(|p| p.state),
            now_ms: Utc::now().timestamp_millis(),
            pools,
            outcomes,
        }))
    }

    async fn tenant_list(&self, query: app::api::TenantQuery) -> Result<app::api::TenantList, BackendError> {
        tenants::list(self, query).await
    }

    async fn tenant(&self, name: String) -> Result<Option<TenantView>, BackendError> {
        tenants::detail(self, name).await
    }

    async fn dashboard(&self) -> Result<app::api::Dashboard, BackendError> {
        use app::api::dashboard::{ssr, QuotaOverview, MAX_SAMPLES, SPAN_MS};
        let now = Utc::now();
        let pools = crate::pools::store::list_pools(&self.db).await.map_err(unavailable)?;
        // Every pool's samples in one read, not one per pool.
        let since = now - chrono::TimeDelta::milliseconds(SPAN_MS);
        let served = draws_by_source(&self.metrics.pool.draws);
        // Every member's health in one read, not a few queries per pool.
        let (members, _) = crate::health::every_member_health(&self.db).await.map_err(unavailable)?;
        // Last, so that the samples' lock is not held across another query.
        let samples = samples::recent(self, now, since, MAX_SAMPLES).await.map_err(unavailable)?;
        let mut by_pool: std::collections::HashMap<String, Vec<MemberView>> = std::collections::HashMap::new();
        for m in members {
            by_pool.entry(m.pool).or_default().push(MemberView {
                channel: m.channel,
                state: m.state,
                pinned: m.pinned,
                base_weight: m.base_weight,
                effective_weight: m.effective_weight,
            });
        }
        let health: Vec<Vec<MemberView>> = pools.iter().map(|p| by_pool.remove(&p.name).unwrap_or_default()).collect();
        let cards = pools
            .into_iter()
            .zip(health)
            .map(|(p, members)| {
                let (taken, truncated) =
                    samples.pages.get(&p.name).map_or((&[][..], false), |page| (&page.samples[..], page.truncated));
                let inputs: Vec<ssr::SampleInput> = taken.iter().map(sample_input).collect();
                let served_here = served.get(&p.name).copied().unwrap_or_default();
                ssr::pool_card(p.name, p.kind, &inputs, truncated, served_here, members)
            })
            .collect();
        drop(samples);
        let tenants = tenants::usage_of_every_tenant(self).await?;
        let mut fullest = ssr::by_usage(tenants.iter().map(|(name, usage)| ssr::tenant_quota(name, usage)).collect());
        let open = fullest.iter().map(|t| t.open).sum();
        let more = fullest.len().saturating_sub(app::api::dashboard::DASHBOARD_TENANTS) as u64;
        fullest.truncate(app::api::dashboard::DASHBOARD_TENANTS);
        let quotas = QuotaOverview { tenants: fullest, more, open, swept_here: self.metrics.quota_swept.get() };
        Ok(app::api::Dashboard {
            now_ms: now.timestamp_millis(),
            read_at: now.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            pools: cards,
            attention: Vec::new(),
            quotas,
        })
    }

    async fn change_list(
        &self,
        query: app::api::changes::ChangeQuery,
    ) -> Result<app::api::changes::ChangeList, BackendError> {
        lists::changes(self, query).await
    }

    async fn pool_tiers(&self, pool: String) -> Result<Option<api::tiers::AdaptiveTiers>, BackendError> {
        let Ok(pool) = client::pool::PoolName::parse(&pool) else { return Ok(None) };
        crate::tiers::read(&self.db, &pool).await.map_err(|e| match e {
            crate::error::ChangeError::Db(e) => unavailable(e),
            other => BackendError::Unavailable(other.to_string()),
        })
    }

    async fn pool_history(&self, pool: String) -> Result<Option<api::pools::PoolHistory>, BackendError> {
        let Ok(pool) = client::pool::PoolName::parse(&pool) else { return Ok(None) };
        crate::pools::history::store::pool_history(&self.db, &pool).await.map_err(unavailable)
    }

    async fn pool_ramp(&self, pool: String) -> Result<Option<api::ramps::RampDetail>, BackendError> {
        let Ok(pool) = client::pool::PoolName::parse(&pool) else { return Ok(None) };
        let newest =
            crate::ramps::store::list_ramps(&self.db, Some(pool.as_str()), false, 1).await.map_err(unavailable)?;
        let Some(row) = newest.first() else { return Ok(None) };
        crate::ramps::view::detail(self, row.id).await.map_err(|e| BackendError::Unavailable(e.to_string()))
    }

    async fn routes(&self) -> Result<Vec<api::routes::RouteSummary>, BackendError> {
        crate::routing::store::list_routes(&self.db).await.map_err(unavailable)
    }

    async fn route(&self, name: String) -> Result<Option<app::api::routes::RouteView>, BackendError> {
        routes::route(self, name).await
    }

    async fn live_ramps(&self) -> Result<Vec<api::ramps::RampSummary>, BackendError> {
        let rows = crate::ramps::store::list_ramps(&self.db, None, true, 200).await.map_err(unavailable)?;
        Ok(crate::ramps::view::summaries(&rows))
    }

    async fn break_glass(&self) -> Result<Vec<api::changes::BreakGlass>, BackendError> {
        crate::gate::break_glass::store::list(&self.db, Some(false)).await.map_err(unavailable)
    }

    async fn users(
        &self,
        query: app::api::lists::ListQuery,
    ) -> Result<app::api::lists::ListPage<UserView>, BackendError> {
        lists::users(self, query).await
    }

    async fn tokens(&self) -> Result<Vec<TokenView>, BackendError> {
        let tokens = crate::access::store::list_tokens(&self.db).await.map_err(unavailable)?;
        Ok(tokens
            .into_iter()
            .map(|t| TokenView {
                id: t.id,
                name: t.name,
                prefix: t.prefix,
                scope: t.scope,
                created_by: t.created_by,
                created_at: minute(t.created_at),
                last_used_at: t.last_used_at.map(minute),
                revoked_at: t.revoked_at.map(minute),
                bindings: api::access::TokenBindings {
                    tenants: t.tenants,
                    pools: t.pools,
                    routes: t.routes,
                    channels: t.channels,
                },
            })
            .collect())
    }
}

/// A channel's outcome reports of the last hour, per minute (the health evaluation keeps an
/// hour before its window).
async fn last_hour_of_outcomes(
    state: &AppState,
    code: &crate::channels::ChannelCode,
) -> Result<Vec<app::api::OutcomeMinute>, String> {
    let code = client::health::ChannelCode::parse(code.as_str()).map_err(|e| format!("{}: {}", e.field, e.rule))?;
    let now_minute = Utc::now().timestamp().div_euclid(60);
    let minutes = state
        .outcomes
        .window(&code, now_minute - 59, now_minute)
        .await
        .map_err(|e| format!("outcome reports unavailable: {e}"))?;
    Ok(minutes
        .into_iter()
        .map(|m| app::api::OutcomeMinute {
            at_ms: m.minute * 60_000,
            ok: m.ok,
            fail: m.fail,
            latency_ms: (m.latency_count > 0).then(|| m.latency_ms_sum as f64 / m.latency_count as f64),
        })
        .collect())
}

/// A time as the UI lists it: UTC, to the minute.
fn minute(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The members of a pool's health report (`crate::health::pool_health`) as the UI shows them.
fn member_views(members: &[crate::health::MemberHealth]) -> Vec<MemberView> {
    members
        .iter()
        .map(|m| MemberView {
            channel: m.channel.clone(),
            state: m.state.clone(),
            pinned: m.pinned.clone(),
            base_weight: m.base_weight,
            effective_weight: m.effective_weight,
        })
        .collect()
}

/// A stored sample as the dashboard's summaries take it.
fn sample_input(s: &crate::samples::sampler::PoolSample) -> app::api::dashboard::ssr::SampleInput {
    app::api::dashboard::ssr::SampleInput {
        at_ms: s.taken_at.timestamp_millis(),
        day: s.day.to_string(),
        length: s.length,
        batches: s.batches,
        window_seconds: s.window_seconds,
        draws: s.draws,
        members: s
            .members
            .iter()
            .map(|(name, m)| app::api::dashboard::ssr::MemberInput {
                member: name.clone(),
                hits: m.hits,
                window_hits: m.window_hits,
                expected_share: m.expected_share,
                actual_share: m.actual_share,
            })
            .collect(),
    }
}

/// This process's draws by pool and source, from its draw counter (labels `pool`,
/// `member`, `source`): what it served itself since it started.
fn draws_by_source(
    draws: &prometheus::IntCounterVec,
) -> std::collections::HashMap<String, app::api::dashboard::DrawsBySource> {
    use prometheus::core::Collector;
    let mut out: std::collections::HashMap<String, app::api::dashboard::DrawsBySource> = Default::default();
    for family in draws.collect() {
        for metric in family.get_metric() {
            let label = |name: &str| metric.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_owned());
            let (Some(pool), Some(source)) = (label("pool"), label("source")) else { continue };
            let n = metric.get_counter().get_value() as u64;
            let entry = out.entry(pool).or_default();
            match source.as_str() {
                "redis" => entry.redis += n,
                "local" => entry.local += n,
                "static" => entry.fallback += n,
                _ => {}
            }
        }
    }
    out
}

/// A database error as the UI shows it: no internals.
fn unavailable(e: sqlx::Error) -> BackendError {
    tracing::error!(error = %e, "a server function's query failed");
    BackendError::Unavailable("the configuration store (Postgres) did not answer; try again".into())
}

/// A filter time: RFC 3339, or what a `datetime-local` input or a date gives, read as UTC.
fn parse_time(field: &str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, BackendError> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else { return Ok(None) };
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw, format) {
            return Ok(Some(t.and_utc()));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        return Ok(Some(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc()));
    }
    Err(BackendError::invalid(
        field,
        format!("{raw:?} is not a time; write e.g. 2026-11-30T14:00 (UTC) or 2026-11-30T14:00:00+01:00"),
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn filter_times_accept_rfc3339_local_inputs_and_dates_as_utc() {
        let t = |raw| parse_time("from", Some(raw)).unwrap().unwrap().to_rfc3339();
        assert_eq!(t("2026-11-30T14:00:00+01:00"), "2026-11-30T13:00:00+00:00");
        assert_eq!(t("2026-11-30T14:00"), "2026-11-30T14:00:00+00:00");
        assert_eq!(t("2026-11-30"), "2026-11-30T00:00:00+00:00");
        assert_eq!(parse_time("from", Some(" ")).unwrap(), None);
        assert!(parse_time("to", Some("yesterday")).unwrap_err().to_string().starts_with("to:"));
    }
}
