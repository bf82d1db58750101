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
    let demo = [(
        "pool:cn-pay",
        json!({
            "name": "cn-pay",
            "kind": "channels",
            "ordering": "smooth",
            "batch_size": 1024,
            "low_water": 128,
            "timezone": "Asia/Shanghai",
            "members": [
                {"member": "ALIPAY_A", "weight": 45},
                {"member": "WECHAT_B", "weight": 30},
                {"member": "UNION_C", "weight": 25}
            ]
        }),
    )];
    for (entity, body) in demo {
        let mut tx = db.begin().await?;
        // Serialise concurrent seeds on the entity so that two never both see "none yet".
        sqlx::query("select pg_advisory_xact_lock(hashtext($1))").bind(entity).execute(&mut *tx).await?;
        let existing: i64 = sqlx::query_scalar("select count(*) from snapshot where entity = $1")
            .bind(entity)
            .fetch_one(&mut *tx)
            .await?;
        if existing == 0 {
            crate::db::snapshot::insert_next(&mut tx, entity, &body).await?;
            report.created.push(entity.to_owned());
        } else {
            report.kept.push(entity.to_owned());
        }
        tx.commit().await?;
    }
    Ok(report)
}
