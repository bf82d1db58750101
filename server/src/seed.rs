//! `tessera demo-seed`: demo data so a fresh deployment has something to show.

use serde_json::json;
use sqlx::PgPool;

/// What the seed did.
#[derive(Debug, Default)]
pub struct SeedReport {
    /// Entities whose first snapshot was written now.
    pub created: Vec<String>,
    /// Entities that already had snapshots and were left alone.
    pub kept: Vec<String>,
}

/// Writes the demo pool's first snapshot unless it already has one; running it twice
/// changes nothing the second time.
#[tracing::instrument(skip_all, err)]
pub async fn demo_seed(db: &PgPool) -> anyhow::Result<SeedReport> {
    let mut report = SeedReport::default();
    // Bodies are the published snapshots without their version (the row's version is).
    let demo = [
        (
            "pool:cn-pay",
            json!({
                "kind": "channels",
                "ordering": "smooth",
                "batch_size": 1024,
                "low_water": 128,
                "timezone": "Asia/Shanghai",
                "weights": [
                    {"member": "ALIPAY_A", "weight": 45},
                    {"member": "WECHAT_B", "weight": 30},
                    {"member": "UNION_C", "weight": 25}
                ],
                "eject_rebuild_percent": 50
            }),
        ),
        (
            "pool:sea-pay",
            json!({
                "kind": "tiers",
                "ordering": "smooth",
                "batch_size": 1024,
                "low_water": 128,
                "timezone": "Asia/Singapore",
                "weights": [
                    {"member": "G", "weight": 60},
                    {"member": "N", "weight": 30},
                    {"member": "U", "weight": 10}
                ],
                "tiers": {
                    "G": [{"member": "GRAB_G1", "weight": 50}, {"member": "DBS_G2", "weight": 50}],
                    "N": [{"member": "OCBC_N1", "weight": 70}, {"member": "UOB_N2", "weight": 30}],
                    "U": [{"member": "SHOPEE_U1", "weight": 100}]
                },
                "peak_windows": [{"start": "19:00", "end": "23:00", "multiplier": 3}],
                "eject_rebuild_percent": 50
            }),
        ),
        (
            "tenant:acme",
            json!({
                "monthly_tokens": 50_000_000,
                "daily_requests": 100_000,
                "concurrency": 64,
                "grants": [
                    {"id": "launch-bonus", "kind": "bonus", "priority": 1, "amount": 2_000_000,
                     "starts_at": null, "expires_at": "2027-03-31T16:00:00Z"}
                ],
                "reservation_ttl": 600_000,
                "retention_days": 62,
                "fallback": {"policy": "fail_open_limited", "allowance": 100_000}
            }),
        ),
    ];
    for (entity, body) in demo {
        // Audited like any change (a snapshot version, an audit row, an outbox row), and
        // only when the entity has no snapshot yet: a second seed changes nothing.
        let change = crate::db::change::Change {
            entity,
            action: "seed",
            actor: "demo-seed",
            source: crate::db::audit::Source::System,
            reason: Some("demo data"),
            request_id: None,
            body: &body,
            expected_version: Some(0),
        };
        match crate::db::change::apply_change(db, &change).await {
            Ok(_) => report.created.push(entity.to_owned()),
            Err(crate::db::change::ChangeError::Conflict { .. }) => report.kept.push(entity.to_owned()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}
