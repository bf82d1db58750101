//! The dashboard: what the deployment is connected to and what it has published, and
//! how its pools and quotas are doing (charts from the sampler's samples), refreshed every
//! few seconds in place while the tab is visible.

use leptos::prelude::*;

use crate::api::attention::{Concern, Severity, BUDGET_THRESHOLD_PERCENT};
use crate::api::dashboard::{Dashboard as DashboardData, MemberShare, PoolCard, QuotaOverview, TenantQuota, SPAN_MS};
use crate::api::{get_dashboard, get_system_status, DependencyStatus, SystemStatus};
use crate::components::charts::{grouped, DeviationBars, ShareRow, StateItem, StateStrip};
use crate::components::number::points;
use crate::components::plot::{Plot, PlotLoading, Point, Series, Shape, Unit};

/// How often the pools and quotas are read again while the page is visible.
pub use crate::components::refresh::REFRESH_EVERY;

/// Live system status, fetched through a server function: rendered on the server, and
/// fetched again from the browser when "Check again" is pressed. Below it the pools and
/// quotas, read again every [`REFRESH_EVERY`] (skipped while the tab is hidden); the old
/// charts stay until the new data is in.
#[component]
pub fn Dashboard() -> impl IntoView {
    let checks = RwSignal::new(0u32);
    let status = Resource::new(move || checks.get(), |_| get_system_status());
    let refreshes = RwSignal::new(0u32);
    let data = Resource::new(move || refreshes.get(), |_| get_dashboard());
    let ramps = Resource::new(move || refreshes.get(), |_| crate::api::ramps::live_ramps());
    crate::components::refresh::every_while_visible(refreshes, || true);
    view! {
        <h1>"Dashboard"</h1>
        <Transition fallback=|| view! { <section class="card attention" aria-busy="true"><p>"Looking for what needs attention…"</p></section> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <AttentionStrip concerns=d.attention/> }.into_any(),
                    Err(_) => ().into_any(),
                }
            })}
        </Transition>
        <section class="card" aria-labelledby="system-heading">
            <div class="card-head">
                <h2 id="system-heading">"System"</h2>
                <button type="button" id="check-again" on:click=move |_| checks.update(|n| *n += 1)>
                    "Check again"
                </button>
            </div>
            <Transition fallback=|| view! { <p>"Checking…"</p> }>
                {move || Suspend::new(async move {
                    match status.await {
                        Ok(status) => view! { <StatusTable status checks=checks.get_untracked()/> }.into_any(),
                        Err(e) => view! {
                            <p class="error" role="alert">"Could not load the status: " {e.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Transition>
        </section>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match ramps.await {
                    Ok(list) if list.is_empty() => ().into_any(),
                    Ok(list) => view! { <RampsCard ramps=list/> }.into_any(),
                    Err(e) => view! { <section class="card"><p class="error" role="alert">"Could not load the ramps: " {e.to_string()}</p></section> }.into_any(),
                }
            })}
        </Transition>
        <Transition fallback=|| view! {
            <section class="card" aria-busy="true">
                <p>"Loading the pools…"</p>
                <PlotLoading title="Tickets in the list and standby batch, last hour"/>
            </section>
        }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <Overview data=d refreshes=refreshes.get_untracked()/> }.into_any(),
                    Err(e) => view! {
                        <section class="card">
                            <p class="error" role="alert">"Could not load the pools and quotas: " {e.to_string()}</p>
                        </section>
                    }.into_any(),
                }
            })}
        </Transition>
    }
}

/// What needs attention now, the critical first, each linking to the page that fixes it and
/// naming the alert that fires if it lasts; when nothing does, it says so.
#[component]
fn AttentionStrip(concerns: Vec<Concern>) -> impl IntoView {
    let critical = concerns.iter().filter(|c| c.severity == Severity::Critical).count();
    let count = concerns.len().to_string();
    let class = if critical > 0 {
        "card attention attention-critical"
    } else if concerns.is_empty() {
        "card attention attention-clear"
    } else {
        "card attention attention-warning"
    };
    let heading = match (concerns.len(), critical) {
        (0, _) => "Nothing needs attention now".to_owned(),
        (1, _) => "1 thing needs attention".to_owned(),
        (n, 0) => format!("{n} things need attention"),
        (n, c) => format!("{n} things need attention, {c} critical"),
    };
    view! {
        <section class=class id="attention" aria-labelledby="attention-heading" data-count=count>
            <h2 id="attention-heading">{heading}</h2>
            {if concerns.is_empty() {
                view! {
                    <p id="attention-clear">
                        "Every member is drawn near its share and healthy, no ramp is held, nothing waits for your review, "
                        "every break-glass flag is acknowledged and no tenant is over "
                        {BUDGET_THRESHOLD_PERCENT} " % of its tokens."
                    </p>
                }.into_any()
            } else {
                view! {
                    <ul class="attention-list">
                        {concerns.into_iter().map(|c| {
                            let (symbol, word) = match c.severity {
                                Severity::Critical => ("✕", "critical"),
                                Severity::Warning => ("!", "warning"),
                            };
                            view! {
                                <li class=format!("concern concern-{word}") data-kind=c.kind.clone()>
                                    <span class="concern-severity"><span aria-hidden="true">{symbol}" "</span>{word}</span>
                                    " "<a href=c.href.clone()>{c.text.clone()}</a>
                                    {c.alert.map(|a| view! { <span class="detail">" Alert: "<code>{a}</code></span> })}
                                </li>
                            }
                        }).collect_view()}
                    </ul>
                }.into_any()
            }}
        </section>
    }
}

/// The ramps running, paused or aborting now, each linking to its page.
#[component]
fn RampsCard(ramps: Vec<api::ramps::RampSummary>) -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="ramps-heading">
            <h2 id="ramps-heading">"Ramps"</h2>
            <table class="grid" id="dashboard-ramps">
                <thead><tr><th scope="col">"Pool"</th><th scope="col">"State"</th><th scope="col">"Step"</th><th scope="col">"Canary"</th><th scope="col">"Since"</th></tr></thead>
                <tbody>
                    {ramps.into_iter().map(|r| view! {
                        <tr data-ramp=r.id>
                            <td><a href=format!("/pools/{}/ramp", r.pool)>{r.pool.clone()}</a></td>
                            <td>{r.state.as_str()}</td>
                            <td>{r.step} " of " {r.steps}</td>
                            <td>{r.canary.join(", ")} " at " {points(r.canary_share, 1)}</td>
                            <td>{r.step_started_at.clone()}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// The pools' cards and the quota overview, as read at `data.now_ms`.
#[component]
fn Overview(data: DashboardData, refreshes: u32) -> impl IntoView {
    let now_ms = data.now_ms;
    let pools = if data.pools.is_empty() {
        view! { <section class="card"><p>"No pools yet."</p></section> }.into_any()
    } else {
        data.pools.into_iter().map(|pool| view! { <PoolCardView pool now_ms/> }).collect_view().into_any()
    };
    view! {
        <div id="dashboard" data-read-at=data.now_ms.to_string() data-refreshes=refreshes.to_string()>
            <p class="detail" id="dashboard-read-at">
                "Pools and quotas as read at " {data.read_at} "; read again every "
                {REFRESH_EVERY.as_secs()} " s while this tab is visible."
            </p>
            {pools}
            <QuotaCard quotas=data.quotas/>
        </div>
    }
}

fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

/// Hover bands per pool chart: every two minutes of the hour (a page of 20 pools carries
/// them all).
const DASHBOARD_BANDS: usize = 30;

/// The list length in words: how many samples, the lowest, highest and newest length.
fn length_summary(length: &[crate::api::dashboard::LengthPoint]) -> String {
    let (Some(first), Some(last)) = (length.first(), length.last()) else {
        return "No samples yet.".to_owned();
    };
    let min = length.iter().map(|p| p.length).min().unwrap_or(0);
    let max = length.iter().map(|p| p.length).max().unwrap_or(0);
    format!(
        "{} samples from {} to {}: lowest {}, highest {}, newest {} tickets.",
        length.len(),
        crate::components::plot::utc_text(first.at_ms),
        crate::components::plot::utc_text(last.at_ms),
        grouped(min),
        grouped(max),
        grouped(last.length)
    )
}

#[component]
fn PoolCardView(pool: PoolCard, now_ms: i64) -> impl IntoView {
    let name = pool.name.clone();
    let heading = format!("pool-{name}-heading");
    let window = pool.window_seconds.map(|s| format!(" (in {s:.0} s)")).unwrap_or_default();
    let rate = pool.refills_per_minute.map(|r| format!("{r:.2}"));
    let served = pool.served_here;
    let health: Vec<StateItem> = pool
        .members
        .iter()
        .map(|m| StateItem {
            name: m.channel.clone(),
            state: m.state.clone(),
            note: match (&m.pinned, m.effective_weight) {
                (Some(pin), _) => Some(format!("pinned {pin}")),
                (None, 0) if m.state != "ejected" => Some("not drawn: weight 0".to_owned()),
                _ => None,
            },
        })
        .collect();
    let minute_rows = pool.shares.iter().map(|s: &MemberShare| ShareRow {
        member: s.member.clone(),
        expected: s.expected_minute,
        actual: s.actual_minute,
        draws: s.draws_minute.zip(pool.draws_minute),
    });
    let hour_rows = pool.shares.iter().map(|s: &MemberShare| ShareRow {
        member: s.member.clone(),
        expected: s.expected_hour,
        actual: s.actual_hour,
        draws: pool.draws_hour.map(|all| (s.draws_hour, all)),
    });
    let (minute_rows, hour_rows): (Vec<ShareRow>, Vec<ShareRow>) = (minute_rows.collect(), hour_rows.collect());
    let length_summary = length_summary(&pool.length);
    let points: Vec<Point> = pool.length.iter().map(|p| Point::new(p.at_ms, p.length as f64)).collect();
    view! {
        <section class="card pool-card" id=format!("pool-card-{name}") data-pool=name.clone() aria-labelledby=heading.clone()>
            <div class="card-head">
                <h2 id=heading.clone()>"Pool " <a href=format!("/pools/{name}")><code>{name.clone()}</code></a></h2>
                <span class="detail">{pool.kind}" pool"</span>
            </div>
            <div class="pool-grid">
                <Plot
                    id=format!("length-{name}")
                    title="Tickets in the list and standby batch, last hour"
                    unit=Unit::Count("tickets")
                    series=vec![Series { name: "list and standby batch".to_owned(), shape: Shape::Line, tone: "accent", points }]
                    from_ms=now_ms - SPAN_MS
                    to_ms=now_ms
                    summary=length_summary
                    empty="No samples yet: the sampler takes one every 10 s."
                    bands=DASHBOARD_BANDS
                />
                <dl class="facts stats">
                    <dt>"Draws from Redis, last minute"</dt>
                    <dd id=format!("draws-minute-{name}")>{or_dash(pool.draws_minute)}{window}</dd>
                    <dt>"Draws from Redis, last hour"</dt>
                    <dd id=format!("draws-hour-{name}")>{or_dash(pool.draws_hour)}</dd>
                    <dt>"Refills, last minute"</dt>
                    <dd id=format!("refills-minute-{name}")>{or_dash(pool.refills_minute)}</dd>
                    <dt>"Refills per minute, last hour"</dt>
                    <dd id=format!("refills-rate-{name}")>{or_dash(rate)}{pool.refills_hour.map(|n| format!(" ({n} in all)"))}</dd>
                    <dt>"Draws through this server since it started"</dt>
                    <dd id=format!("served-{name}")>
                        "redis " {grouped(served.redis)} " · local " {grouped(served.local)} " · static " {grouped(served.fallback)}
                    </dd>
                </dl>
            </div>
            {pool.truncated.then(|| view! { <p class="notice">"More samples were taken this hour than a chart holds: the oldest are left out."</p> })}
            <h3>"Health"</h3>
            {if health.is_empty() {
                view! { <p class="notice">"No members."</p> }.into_any()
            } else {
                view! { <StateStrip id=format!("health-{name}") label=format!("Health of the channels of {name}") items=health/> }.into_any()
            }}
            <div class="share-grid">
                <DeviationBars id=format!("shares-minute-{name}") caption="Shares, last minute".to_owned() rows=minute_rows/>
                <DeviationBars id=format!("shares-hour-{name}") caption="Shares, last hour".to_owned() rows=hour_rows/>
            </div>
        </section>
    }
}

#[component]
fn QuotaCard(quotas: QuotaOverview) -> impl IntoView {
    let (open, more) = (quotas.open, quotas.more);
    view! {
        <section class="card" id="quota-overview" aria-labelledby="quota-heading">
            <div class="card-head"><h2 id="quota-heading">"Quotas"</h2></div>
            <dl class="facts stats">
                <dt>"Reservations open now"</dt>
                <dd id="quota-open">{grouped(open)}</dd>
                <dt>"Returned after their deadline by this server's sweeper since it started"</dt>
                <dd id="quota-swept">{grouped(quotas.swept_here)}</dd>
            </dl>
            {if quotas.tenants.is_empty() {
                view! { <p>"No tenants yet."</p> }.into_any()
            } else {
                view! {
                    <div class="table-scroll">
                        <table class="grid" id="quota-tenants">
                            <caption class="visually-hidden">"Tenants by token usage this period, the fullest first"</caption>
                            <thead>
                                <tr>
                                    <th scope="col">"Tenant"</th>
                                    <th scope="col">"Period"</th>
                                    <th scope="col" class="num">"Used"</th>
                                    <th scope="col" class="num">"Reserved"</th>
                                    <th scope="col" class="num">"Total"</th>
                                    <th scope="col">"Usage"</th>
                                    <th scope="col" class="num">"Open reservations"</th>
                                </tr>
                            </thead>
                            <tbody>
                                {quotas.tenants.into_iter().map(|t| view! { <TenantRow tenant=t/> }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                    {(more > 0).then(|| view! {
                        <p id="quota-more">{format!("and {} more: ", grouped(more))} <a href="/tenants">"all tenants"</a></p>
                    })}
                }.into_any()
            }}
        </section>
    }
}

#[component]
fn TenantRow(tenant: TenantQuota) -> impl IntoView {
    let t = tenant;
    if let Some(why) = t.error {
        return view! {
            <tr data-tenant=t.name.clone()>
                <th scope="row"><code>{t.name.clone()}</code></th>
                <td colspan="6" class="notice">{why}</td>
            </tr>
        }
        .into_any();
    }
    let share = |n: u64| if t.total == 0 { 0.0 } else { (n as f64 / t.total as f64 * 100.0).min(100.0) };
    let (used_w, reserved_w) = (share(t.used), share(t.reserved).min(100.0 - share(t.used)));
    view! {
        <tr data-tenant=t.name.clone() data-percent=t.percent.map(|p| format!("{p:.1}")).unwrap_or_default()>
            <th scope="row"><code>{t.name.clone()}</code></th>
            <td>{t.period.unwrap_or_default()}</td>
            <td class="num">{grouped(t.used)}</td>
            <td class="num">{grouped(t.reserved)}</td>
            <td class="num">{grouped(t.total)}</td>
            <td class="usage">
                <svg class="usage-bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true" focusable="false">
                    <rect class="track" x="0" y="0" width="100" height="10"/>
                    <rect class="used" x="0" y="0" width=format!("{used_w:.2}") height="10"/>
                    <rect class="reserved" x=format!("{used_w:.2}") y="0" width=format!("{reserved_w:.2}") height="10"/>
                </svg>
                " " {or_dash(t.percent.map(|p| points(p, 1)))}
            </td>
            <td class="num">{t.open} " of " {t.concurrency}</td>
        </tr>
    }
    .into_any()
}

#[component]
fn StatusTable(status: SystemStatus, checks: u32) -> impl IntoView {
    let version = status.snapshot_version.map(|v| v.to_string()).unwrap_or_else(|| "none yet".to_owned());
    view! {
        <table class="kv" id="system-status" data-checks=checks>
            <tbody>
                <DependencyRow name="Postgres" id="postgres" dep=status.postgres/>
                <DependencyRow name="Redis" id="redis" dep=status.redis/>
                <tr>
                    <th scope="row">"Snapshot version"</th>
                    <td id="snapshot-version">{version}</td>
                </tr>
                <tr>
                    <th scope="row">"Snapshots stored"</th>
                    <td id="snapshot-count">{status.snapshot_count}</td>
                </tr>
                <tr>
                    <th scope="row">"Redis key prefix"</th>
                    <td><code id="redis-prefix">{status.redis_prefix}</code></td>
                </tr>
                <tr>
                    <th scope="row">"Checked at"</th>
                    <td id="checked-at">{status.checked_at}</td>
                </tr>
            </tbody>
        </table>
    }
}

#[component]
fn DependencyRow(name: &'static str, id: &'static str, dep: DependencyStatus) -> impl IntoView {
    let (label, class) = if dep.up { ("up", "badge ok") } else { ("down", "badge bad") };
    let detail = if dep.up { dep.version.unwrap_or_default() } else { dep.error.unwrap_or_default() };
    view! {
        <tr>
            <th scope="row">{name}</th>
            <td id=format!("{id}-status")>
                <span class=class>{label}</span>
                " "
                <span class="detail" id=format!("{id}-detail")>{detail}</span>
            </td>
        </tr>
    }
}
