//! `[quota]` and `[leases]`: the data plane's per-instance settings (the quota journal, hot
//! tenants' chunks, ticket leases).

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileQuota {
    pub(super) journal: Option<String>,
    hot_rate: Option<u32>,
    hot_tenants: Option<Vec<String>>,
    chunk_lease_ms: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLeases {
    tickets_max: Option<u32>,
    ticket_hold_ms: Option<u32>,
}

/// A whole number from the variable `var`, else the file's `from_file`, else `default`,
/// within `range`; refused naming the field and the variable.
fn whole_number(
    env: &impl Fn(&str) -> Option<String>,
    (var, field): (&str, &str),
    from_file: Option<u32>,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> anyhow::Result<u32> {
    let value = match env(var).filter(|v| !v.trim().is_empty()) {
        Some(raw) => raw.trim().parse::<u32>().ok(),
        None => Some(from_file.unwrap_or(default)),
    };
    value.filter(|v| range.contains(v)).ok_or_else(|| {
        anyhow::anyhow!("{field} ({var}): must be a whole number from {} to {}", range.start(), range.end())
    })
}

/// `leases.tickets_max` (0..=4096; 0 is off) and `leases.ticket_hold_ms` (1..=10000).
pub(super) fn ticket_leases(
    env: &impl Fn(&str) -> Option<String>,
    file: &FileLeases,
) -> anyhow::Result<Option<client::pool::LeaseSettings>> {
    let max = whole_number(env, ("TESSERA_TICKET_LEASE_MAX", "leases.tickets_max"), file.tickets_max, 0, 0..=4096)?;
    let hold = whole_number(
        env,
        ("TESSERA_TICKET_LEASE_HOLD_MS", "leases.ticket_hold_ms"),
        file.ticket_hold_ms,
        100,
        1..=10_000,
    )?;
    Ok((max > 0).then(|| client::pool::LeaseSettings {
        max: max as usize,
        hold: std::time::Duration::from_millis(u64::from(hold)),
    }))
}

/// `quota.hot_rate` (0..=1,000,000 reserves a second; 0: none by rate), `quota.hot_tenants`
/// (tenant names; the variable: comma-separated) and `quota.chunk_lease_ms` (100..=600,000).
pub(super) fn quota_chunks(
    env: &impl Fn(&str) -> Option<String>,
    file: &FileQuota,
) -> anyhow::Result<Option<client::quota::ChunkSettings>> {
    let rate = whole_number(env, ("TESSERA_QUOTA_HOT_RATE", "quota.hot_rate"), file.hot_rate, 0, 0..=1_000_000)?;
    let lease = whole_number(
        env,
        ("TESSERA_QUOTA_CHUNK_LEASE_MS", "quota.chunk_lease_ms"),
        file.chunk_lease_ms,
        30_000,
        100..=600_000,
    )?;
    let names: Vec<String> = match env("TESSERA_QUOTA_HOT_TENANTS").filter(|v| !v.trim().is_empty()) {
        Some(raw) => raw.split(',').map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect(),
        None => file.hot_tenants.clone().unwrap_or_default(),
    };
    let mut hot = std::collections::HashSet::new();
    for name in names {
        let tenant = client::quota::TenantId::parse(&name).map_err(|e| {
            anyhow::anyhow!("quota.hot_tenants (TESSERA_QUOTA_HOT_TENANTS): {name:?} is not a tenant name: {e}")
        })?;
        hot.insert(tenant);
    }
    if rate == 0 && hot.is_empty() {
        return Ok(None);
    }
    let lease = std::time::Duration::from_millis(u64::from(lease));
    Ok(Some(client::quota::ChunkSettings::new("tessera", rate, hot, lease)))
}
