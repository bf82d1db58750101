//! Everything the dashboard shows, in one call: a card per pool (list length over the last
//! hour, expected against actual shares over the last minute and hour, refills, draws by
//! source, its members' health) and the quota overview (tenants by usage).
//!
//! Where each number comes from, and so what it covers:
//! - list length, shares, draws and refills: the sampler's samples (every 10 s, in
//!   Postgres), so every client's draws from Redis count, whichever process made them;
//! - draws by source (`redis`, `local`, `static`): this server process's own draws (its
//!   HTTP draw endpoint, `tessera simulate` run inside it), since it started. A client's
//!   local and static draws happen where Redis could not be reached, so no shared counter
//!   sees them; each client process exports its own in its metrics;
//! - quota usage: Redis, now; reservations swept: by this server's sweeper since it started.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// How far back the charts reach, in milliseconds.
pub const SPAN_MS: i64 = 60 * 60 * 1000;

/// The most samples of one pool a card charts (an hour at one every 10 s is 360; the rest
/// is room for extra samples, e.g. two instances both sampling during a leader change).
pub const MAX_SAMPLES: u32 = 720;

/// The whole dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    /// When it was read, in milliseconds since the epoch (server clock): the charts' right
    /// edge.
    pub now_ms: i64,
    /// The same for people (`YYYY-MM-DD HH:MM:SS UTC`).
    pub read_at: String,
    /// Every pool, by name.
    pub pools: Vec<PoolCard>,
    pub quotas: QuotaOverview,
    /// What needs attention now, the critical first (see [`super::attention`]).
    pub attention: Vec<super::attention::Concern>,
}

/// One point of a pool's list length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LengthPoint {
    /// When the sample was taken, in milliseconds since the epoch.
    pub at_ms: i64,
    /// Tickets in the list and the standby batch.
    pub length: u64,
}

/// One member's share of the draws against the share its weights give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberShare {
    pub member: String,
    /// Its expected share in the newest sample, 0..=1.
    pub expected_minute: f64,
    /// Its share of the draws in the newest sample's window (about a minute); `None`
    /// without a window or without draws in it.
    pub actual_minute: Option<f64>,
    /// Its expected share, averaged over the hour's samples.
    pub expected_hour: f64,
    /// Its share of the hour's draws; `None` without draws.
    pub actual_hour: Option<f64>,
    /// Its draws in the newest sample's window.
    pub draws_minute: Option<u64>,
    /// Its draws over the hour's samples.
    pub draws_hour: u64,
}

/// Draws by where they were served from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawsBySource {
    /// From the shared pool in Redis.
    pub redis: u64,
    /// From the process's local pool (Redis unreachable).
    pub local: u64,
    /// By plain weighted random from the static weights (no snapshot either).
    pub fallback: u64,
}

/// One pool's card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolCard {
    pub name: String,
    /// `channels` or `tiers`.
    pub kind: String,
    /// Its list length at each sample of the last hour, oldest first.
    pub length: Vec<LengthPoint>,
    /// More samples were taken in the hour than a card charts: the oldest are left out.
    pub truncated: bool,
    /// Every member of the newest sample (and any other drawn during the hour), by name.
    pub shares: Vec<MemberShare>,
    /// How far back the newest sample's window reaches, in seconds (about a minute).
    pub window_seconds: Option<f64>,
    /// Draws from Redis (every client) in that window.
    pub draws_minute: Option<u64>,
    /// Draws from Redis over the hour's samples.
    pub draws_hour: Option<u64>,
    /// Batches added to its lists in that window: the refills of the last minute.
    pub refills_minute: Option<u64>,
    /// Batches added over the hour's samples.
    pub refills_hour: Option<u64>,
    /// Refills per minute over the hour's samples.
    pub refills_per_minute: Option<f64>,
    /// Draws through this server process since it started, by source.
    pub served_here: DrawsBySource,
    /// Its members' health now, in the pool's order.
    pub members: Vec<super::MemberView>,
}

/// One tenant's token quota now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantQuota {
    pub name: String,
    /// The quota period, when the usage could be read.
    pub period: Option<String>,
    /// Tokens of every live bucket (plan and grants).
    pub total: u64,
    /// Tokens charged.
    pub used: u64,
    /// Tokens held by open reservations.
    pub reserved: u64,
    /// `(used + reserved) / total` in percent; `None` when there is no total or no usage.
    pub percent: Option<f64>,
    /// Reservations open now, and how many may be.
    pub open: u64,
    pub concurrency: u64,
    /// Why the usage could not be read.
    pub error: Option<String>,
}

/// The fullest tenants the dashboard lists (the rest are on the tenants page).
pub const DASHBOARD_TENANTS: usize = 20;

/// The fullest tenants' quotas, and the sweeper's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaOverview {
    /// By usage, the fullest first (those whose usage is unknown last): at most
    /// [`DASHBOARD_TENANTS`] (the page carries only what it shows).
    pub tenants: Vec<TenantQuota>,
    /// Tenants beyond those listed.
    pub more: u64,
    /// Reservations open now, over every tenant.
    pub open: u64,
    /// Reservations this server's sweeper returned after their deadline since it started
    /// (the sweep runs on one instance at a time: on the others this stays 0).
    pub swept_here: u64,
}

/// The most pages of requests in review the attention strip reads (25 a page).
#[cfg(feature = "ssr")]
const MAX_REVIEW_PAGES: u32 = 20;

/// The dashboard now, for any signed-in user. A GET: it is read every few seconds.
#[server(prefix = "/sfn", endpoint = "dashboard", input = GetUrl)]
pub async fn get_dashboard() -> Result<Dashboard, ServerFnError> {
    let session = super::session::ssr::require_session().await?;
    let backend = super::backend()?;
    let mut dashboard = backend.dashboard().await.map_err(ServerFnError::new)?;
    // What the strip needs beyond the cards: live ramps, every request in review and the
    // flags not yet acknowledged. One that cannot be read is named in the strip; the
    // cards still show.
    let mut unread = Vec::new();
    let ramps = backend.live_ramps().await.unwrap_or_else(|_| {
        unread.push("the ramps".to_owned());
        Vec::new()
    });
    let mut changes = Vec::new();
    for page in 1..=MAX_REVIEW_PAGES {
        let in_review = super::changes::ChangeQuery {
            state: Some(api::changes::ChangeState::InReview.as_str().to_owned()),
            page: Some(page),
            ..Default::default()
        };
        match backend.change_list(in_review).await {
            Ok(list) => {
                let last = list.list.page >= list.list.pages;
                changes.extend(list.list.rows);
                if last {
                    break;
                }
            }
            Err(_) => {
                unread.push("the change requests".to_owned());
                break;
            }
        }
    }
    let flags = backend.break_glass().await.unwrap_or_else(|_| {
        unread.push("the break-glass flags".to_owned());
        Vec::new()
    });
    dashboard.attention = super::attention::concerns(
        dashboard.now_ms,
        &dashboard.pools,
        &dashboard.quotas.tenants,
        &ramps,
        &changes,
        &flags,
        Some((&session.user, &session.role)),
        &unread,
    );
    Ok(dashboard)
}

/// What the server hands over to build the dashboard from, and the pure functions that
/// turn samples into a card (the server reads; these summarise, and are tested alone).
#[cfg(feature = "ssr")]
pub mod ssr {
    use std::collections::BTreeMap;

    use engine::counter::{day_count_delta, DaySpan};

    use super::{MemberShare, PoolCard, TenantQuota};
    use crate::api::UsageView;

    /// One stored sample of a pool.
    #[derive(Debug, Clone, PartialEq)]
    pub struct SampleInput {
        pub at_ms: i64,
        /// The pool-local day its members' `hits` count (`YYYY-MM-DD`).
        pub day: String,
        pub length: u64,
        /// The pool's batch counter (see `migrations/0008_sample_refills.sql`).
        pub batches: Option<u64>,
        pub window_seconds: Option<f64>,
        pub draws: Option<u64>,
        pub members: Vec<MemberInput>,
    }

    /// One member of one sample.
    #[derive(Debug, Clone, PartialEq)]
    pub struct MemberInput {
        pub member: String,
        /// Its draws on the sample's day so far.
        pub hits: u64,
        pub window_hits: Option<u64>,
        pub expected_share: f64,
        pub actual_share: Option<f64>,
    }

    /// How much a counter grew over `values` (oldest first): the sum of its steps, where a
    /// step down means the counter restarted (Redis lost it), so all of the new value is
    /// growth. `None` when fewer than two values are known.
    pub fn increase(values: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
        let known: Vec<u64> = values.into_iter().flatten().collect();
        (known.len() >= 2).then(|| known.windows(2).map(|w| day_count_delta(w[0], w[1], DaySpan::SameDay)).sum())
    }

    /// Each member's draws over `samples` (oldest first), from its day counters: the
    /// steps between consecutive samples; after a pool-local midnight, the new day's
    /// count (the old day's draws after the earlier sample are not in the newer one).
    pub fn draws_between(samples: &[SampleInput]) -> BTreeMap<String, u64> {
        let mut draws = BTreeMap::new();
        for pair in samples.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            for m in &after.members {
                let earlier = before.members.iter().find(|b| b.member == m.member).map_or(0, |b| b.hits);
                let span =
                    if before.day == after.day { DaySpan::SameDay } else { DaySpan::NewDay { earlier_day_now: None } };
                let step = day_count_delta(earlier, m.hits, span);
                *draws.entry(m.member.clone()).or_default() += step;
            }
        }
        draws
    }

    /// A pool's card from its samples of the last hour (oldest first).
    pub fn pool_card(
        name: String,
        kind: String,
        samples: &[SampleInput],
        truncated: bool,
        served_here: super::DrawsBySource,
        members: Vec<crate::api::MemberView>,
    ) -> PoolCard {
        let newest = samples.last();
        // The newest sample's window reaches back to an earlier sample: the refills in
        // between are the batch counter's growth over the samples since that one.
        let window_start = newest.and_then(|n| n.window_seconds.map(|w| n.at_ms - (w * 1000.0).round() as i64));
        let refills_minute =
            window_start.and_then(|start| increase(samples.iter().filter(|s| s.at_ms >= start - 1).map(|s| s.batches)));
        let refills_hour = increase(samples.iter().map(|s| s.batches));
        let counted: Vec<i64> = samples.iter().filter(|s| s.batches.is_some()).map(|s| s.at_ms).collect();
        let refills_per_minute = match (refills_hour, counted.first(), counted.last()) {
            (Some(n), Some(first), Some(last)) if last > first => Some(n as f64 * 60_000.0 / (last - first) as f64),
            _ => None,
        };

        let hour_draws = draws_between(samples);
        let draws_hour = (samples.len() >= 2).then(|| hour_draws.values().sum::<u64>());
        let mut names: Vec<String> =
            newest.map(|n| n.members.iter().map(|m| m.member.clone()).collect()).unwrap_or_default();
        names.extend(hour_draws.iter().filter(|(_, n)| **n > 0).map(|(m, _)| m.clone()));
        names.sort();
        names.dedup();
        let shares = names
            .into_iter()
            .map(|member| {
                let now = newest.and_then(|n| n.members.iter().find(|m| m.member == member));
                let expected_sum: f64 = samples
                    .iter()
                    .map(|s| s.members.iter().find(|m| m.member == member).map_or(0.0, |m| m.expected_share))
                    .sum();
                let drawn = hour_draws.get(&member).copied().unwrap_or(0);
                MemberShare {
                    expected_minute: now.map_or(0.0, |m| m.expected_share),
                    actual_minute: now.and_then(|m| m.actual_share),
                    expected_hour: if samples.is_empty() { 0.0 } else { expected_sum / samples.len() as f64 },
                    actual_hour: draws_hour.filter(|d| *d > 0).map(|d| drawn as f64 / d as f64),
                    draws_minute: now.and_then(|m| m.window_hits),
                    draws_hour: drawn,
                    member,
                }
            })
            .collect();

        PoolCard {
            name,
            kind,
            length: thin(samples.iter().map(|s| super::LengthPoint { at_ms: s.at_ms, length: s.length }).collect()),
            truncated,
            shares,
            window_seconds: newest.and_then(|n| n.window_seconds),
            draws_minute: newest.and_then(|n| n.draws),
            draws_hour,
            refills_minute,
            refills_hour,
            refills_per_minute,
            served_here,
            members,
        }
    }

    /// A tenant's token quota from its usage: the live buckets added up.
    /// The most points a length chart gets: an hour of samples (360) would make the page
    /// (and its hydration data) several times larger for a line no wider than the card.
    pub const MAX_CHART_POINTS: usize = 120;

    /// At most [`MAX_CHART_POINTS`] points: the series cut into buckets of consecutive
    /// samples, each bucket kept as its lowest and highest point (in time order), so that
    /// every drain and refill still shows; the newest point is always kept.
    pub fn thin(points: Vec<super::LengthPoint>) -> Vec<super::LengthPoint> {
        if points.len() <= MAX_CHART_POINTS {
            return points;
        }
        let per_bucket = points.len().div_ceil(MAX_CHART_POINTS / 2 - 1);
        let mut out = Vec::with_capacity(MAX_CHART_POINTS);
        for bucket in points.chunks(per_bucket) {
            let low = bucket.iter().min_by_key(|p| (p.length, p.at_ms)).expect("a non-empty bucket");
            let high =
                bucket.iter().max_by_key(|p| (p.length, std::cmp::Reverse(p.at_ms))).expect("a non-empty bucket");
            let (first, second) = if low.at_ms <= high.at_ms { (low, high) } else { (high, low) };
            out.push(*first);
            if second != first {
                out.push(*second);
            }
        }
        let newest = *points.last().expect("more points than the limit");
        if out.last() != Some(&newest) {
            out.push(newest);
        }
        out
    }

    /// A tenant's line on the dashboard from its usage now (or why it could not be read).
    pub fn tenant_quota(name: &str, usage: &Result<UsageView, String>) -> TenantQuota {
        match usage {
            Ok(u) => {
                let (mut total, mut used, mut reserved) = (0u64, 0u64, 0u64);
                for b in u.buckets.iter().filter(|b| b.live) {
                    total = total.saturating_add(b.amount);
                    used = used.saturating_add(b.used);
                    reserved = reserved.saturating_add(b.reserved);
                }
                TenantQuota {
                    name: name.to_owned(),
                    period: Some(u.period.clone()),
                    total,
                    used,
                    reserved,
                    percent: (total > 0).then(|| (used.saturating_add(reserved)) as f64 * 100.0 / total as f64),
                    open: u.leases,
                    concurrency: u.concurrency,
                    error: None,
                }
            }
            Err(why) => TenantQuota {
                name: name.to_owned(),
                period: None,
                total: 0,
                used: 0,
                reserved: 0,
                percent: None,
                open: 0,
                concurrency: 0,
                error: Some(why.clone()),
            },
        }
    }

    /// Tenants by usage, the fullest first; unknown usage last; then by name.
    pub fn by_usage(mut tenants: Vec<TenantQuota>) -> Vec<TenantQuota> {
        tenants.sort_by(|a, b| {
            let key = |t: &TenantQuota| t.percent.unwrap_or(-1.0);
            key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
        });
        tenants
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::api::dashboard::DrawsBySource;

        fn sample(at_s: i64, day: &str, batches: Option<u64>, members: &[(&str, u64, f64)]) -> SampleInput {
            SampleInput {
                at_ms: at_s * 1000,
                day: day.into(),
                length: 100,
                batches,
                window_seconds: None,
                draws: None,
                members: members
                    .iter()
                    .map(|(m, hits, expected)| MemberInput {
                        member: (*m).into(),
                        hits: *hits,
                        window_hits: None,
                        expected_share: *expected,
                        actual_share: None,
                    })
                    .collect(),
            }
        }

        #[test]
        fn an_hour_of_samples_is_thinned_to_the_chart_limit_keeping_extremes_and_the_newest() {
            use super::super::LengthPoint;
            // A sawtooth: drains from 1024 to 24 over 100 samples, refilled, again and again.
            let points: Vec<LengthPoint> =
                (0..360).map(|i| LengthPoint { at_ms: i * 10_000, length: 1024 - (i as u64 % 100) * 10 }).collect();
            let thinned = thin(points.clone());
            assert!(thinned.len() <= MAX_CHART_POINTS, "{}", thinned.len());
            assert!(thinned.windows(2).all(|w| w[0].at_ms < w[1].at_ms), "in time order");
            assert_eq!(thinned.iter().map(|p| p.length).max(), Some(1024));
            assert_eq!(thinned.iter().map(|p| p.length).min(), Some(34));
            assert_eq!(thinned.last(), points.last());
            let few: Vec<LengthPoint> = points[..MAX_CHART_POINTS].to_vec();
            assert_eq!(thin(few.clone()), few, "short series are kept whole");
        }

        #[test]
        fn a_counter_increase_adds_its_steps_and_counts_a_restart_from_zero() {
            assert_eq!(increase([Some(1), Some(3), None, Some(4)]), Some(3));
            assert_eq!(increase([Some(5), Some(2), Some(6)]), Some(6), "down to 2 restarted: 2 + 4");
            assert_eq!(increase([None, Some(5)]), None);
        }

        #[test]
        fn hour_draws_follow_the_day_counters_across_midnight() {
            let samples = [
                sample(0, "2026-11-29", None, &[("A", 10, 0.5), ("B", 4, 0.5)]),
                sample(10, "2026-11-29", None, &[("A", 15, 0.5), ("B", 4, 0.5)]),
                sample(20, "2026-11-30", None, &[("A", 2, 0.5), ("B", 3, 0.5)]),
            ];
            let got = draws_between(&samples);
            assert_eq!(got, BTreeMap::from([("A".into(), 7), ("B".into(), 3)]));
        }

        #[test]
        fn a_card_has_the_hours_shares_and_the_last_minutes_refills() {
            let mut samples = vec![
                sample(0, "d", Some(1), &[("A", 0, 0.75), ("B", 0, 0.25)]),
                sample(30, "d", Some(2), &[("A", 30, 0.75), ("B", 10, 0.25)]),
                sample(60, "d", Some(2), &[("A", 60, 0.5), ("B", 20, 0.5)]),
                sample(90, "d", Some(4), &[("A", 60, 0.5), ("B", 60, 0.5)]),
            ];
            let newest = samples.last_mut().unwrap();
            newest.window_seconds = Some(60.0);
            newest.draws = Some(70);
            newest.members[0].window_hits = Some(30);
            newest.members[0].actual_share = Some(30.0 / 70.0);
            let card = pool_card("p".into(), "channels".into(), &samples, false, DrawsBySource::default(), vec![]);
            assert_eq!(card.length.len(), 4);
            assert_eq!((card.refills_minute, card.refills_hour), (Some(2), Some(3)), "since the sample at 30 s: 2 → 4");
            assert_eq!(card.refills_per_minute, Some(2.0));
            assert_eq!((card.draws_minute, card.draws_hour), (Some(70), Some(120)));
            let a = &card.shares[0];
            assert_eq!((a.member.as_str(), a.draws_hour, a.draws_minute), ("A", 60, Some(30)));
            assert_eq!((a.expected_minute, a.expected_hour, a.actual_hour), (0.5, 0.625, Some(0.5)));
            assert_eq!(card.shares[1].actual_minute, None);
        }

        #[test]
        fn tenants_are_ordered_fullest_first_and_unknown_last() {
            let t = |name: &str, percent: Option<f64>| TenantQuota {
                name: name.into(),
                period: None,
                total: 0,
                used: 0,
                reserved: 0,
                percent,
                open: 0,
                concurrency: 0,
                error: None,
            };
            let got = by_usage(vec![t("a", Some(10.0)), t("b", None), t("c", Some(80.0)), t("d", Some(10.0))]);
            let names: Vec<&str> = got.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["c", "a", "d", "b"]);
        }
    }
}
