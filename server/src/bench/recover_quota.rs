//! The quota side of `tessera bench recover`: what callers were told was settled against
//! what Redis counts once it healed, and whether a tenant with a small plan was admitted
//! beyond it across the wipe.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use client::quota::{SettleOutcome, TenantId};
use serde_json::json;

use crate::state::AppState;

/// The tenant on a small plan, and its monthly tokens: the load exhausts it within the run.
pub const CAPPED_TENANT: &str = "bench-capped";
pub const CAPPED_TOKENS: u64 = 20_000;

/// Tokens callers were told were settled (a settle that answered settled, or queued while
/// Redis was away), per tenant.
#[derive(Default)]
pub struct Told(Mutex<BTreeMap<TenantId, u64>>);

impl Told {
    /// Counts one settle's answer.
    pub fn settled(&self, tenant: &TenantId, actual: u64, outcome: &SettleOutcome) {
        if matches!(outcome, SettleOutcome::Settled { .. } | SettleOutcome::Queued) {
            *self.0.lock().expect("told lock").entry(tenant.clone()).or_default() += actual;
        }
    }

    fn get(&self) -> BTreeMap<TenantId, u64> {
        self.0.lock().expect("told lock").clone()
    }
}

/// Creates the small plan and its tenant through the admin API.
pub async fn configure(http: &reqwest::Client, address: &str, token: &str) -> anyhow::Result<()> {
    let plan = json!({"name": "bench-small", "monthly_tokens": CAPPED_TOKENS, "daily_requests": 10_000_000,
        "concurrency": 10_000, "reason": "bench recover"});
    let response = http.post(format!("{address}/api/v1/plans")).bearer_auth(token).json(&plan).send().await?;
    anyhow::ensure!(response.status().is_success(), "POST /api/v1/plans: {}", response.status());
    let tenant = json!({"plan": "bench-small", "expected_version": 0, "reason": "bench recover"});
    let response =
        http.put(format!("{address}/api/v1/tenants/{CAPPED_TENANT}")).bearer_auth(token).json(&tenant).send().await?;
    anyhow::ensure!(response.status().is_success(), "PUT /api/v1/tenants/{CAPPED_TENANT}: {}", response.status());
    Ok(())
}

/// What Redis counts as used (all buckets) for `tenant`, when it can say.
async fn used(state: &AppState, tenant: &TenantId) -> Option<u64> {
    let usage = state.quotas.usage(tenant).await.ok()?;
    Some(usage.buckets.iter().map(|b| b.used).sum())
}

/// The quota figures of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Healed {
    /// Tokens callers were told were settled that Redis does not count (all tenants).
    pub lost: u64,
    /// Tokens Redis counts beyond what callers were told (all tenants).
    pub extra: u64,
    /// Tokens the small-plan tenant was told were settled beyond its plan.
    pub oversold: u64,
    /// From the wipe until every tenant's count equalled what callers were told.
    pub healed_ms: Option<f64>,
}

/// Waits (up to `deadline` after the wipe) until Redis counts for every tenant exactly what
/// callers were told was settled; reports how far apart they are then.
pub async fn heal(state: &AppState, told: &Told, wiped_at: Instant, deadline: Duration) -> anyhow::Result<Healed> {
    let told = told.get();
    let mut healed = Healed::default();
    loop {
        let (mut lost, mut extra) = (0, 0);
        for (tenant, sum) in &told {
            let counted = used(state, tenant).await.unwrap_or(0);
            lost += sum.saturating_sub(counted);
            extra += counted.saturating_sub(*sum);
        }
        healed.lost = lost;
        healed.extra = extra;
        if lost == 0 && extra == 0 {
            healed.healed_ms = Some(wiped_at.elapsed().as_secs_f64() * 1000.0);
            break;
        }
        if wiped_at.elapsed() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let capped = TenantId::parse(CAPPED_TENANT).context("the capped tenant's name")?;
    healed.oversold = told.get(&capped).copied().unwrap_or(0).saturating_sub(CAPPED_TOKENS);
    Ok(healed)
}
