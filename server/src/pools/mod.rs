//! Pools: weighted ticket pools and their configuration (members, tiers, peak windows,
//! caps). [`routes`] is the admin API, [`draw`] the data plane, [`crate::samples`] the charts'
//! history; [`store`] holds their SQL (rows, compiling and republishing snapshots).

pub mod draw;
pub mod edit;
pub mod history;
pub mod routes;
pub mod store;

use std::collections::BTreeMap;

use client::pool::{PoolName, PoolSnapshot};
use engine::Tier;
use serde::Serialize;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::audit::store::{AuditRow, Source};
use crate::change::{validate_body, Entity, Written};
use crate::error::ApiError;
use crate::error::ChangeError;
use crate::inputs::*;
use api::pools::PoolWriteReply;
use api::WriteReply;

// ---------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------

/// A pool in a listing: defined in `api`, it is `GET /api/v1/pools`'s reply.
pub use api::pools::PoolSummary;

/// Parses a pool body (a snapshot without `version`), naming the field of the first rule
/// it breaks.
pub fn parse_pool_body(body: &Value) -> Result<PoolSnapshot, ChangeError> {
    let mut versioned = body.clone();
    versioned
        .as_object_mut()
        .ok_or_else(|| invalid("snapshot", "must be a JSON object"))?
        .insert("version".to_owned(), json!(1));
    let snapshot: PoolSnapshot = serde_json::from_value(versioned).map_err(|e| pool_field_error(body, e))?;
    snapshot.validate().map_err(from_input)?;
    Ok(snapshot)
}

/// Names the field of a pool body that does not parse: each field is tried on its own
/// (serde's error on the whole body says where, not which field).
pub(crate) fn pool_field_error(body: &Value, whole: serde_json::Error) -> ChangeError {
    use std::collections::BTreeSet;
    fn check<T: serde::de::DeserializeOwned>(body: &Value, field: &str) -> Option<ChangeError> {
        let value = body.get(field)?;
        serde_json::from_value::<T>(value.clone()).err().map(|e| invalid(field, e.to_string()))
    }
    check::<client::pool::PoolKind>(body, "kind")
        .or_else(|| check::<engine::Weights>(body, "weights"))
        .or_else(|| check::<BTreeMap<Tier, engine::Weights>>(body, "tiers"))
        .or_else(|| check::<u32>(body, "batch_size"))
        .or_else(|| check::<u32>(body, "low_water"))
        .or_else(|| check::<engine::Ordering>(body, "ordering"))
        .or_else(|| check::<String>(body, "timezone"))
        .or_else(|| check::<Vec<engine::peak::PeakWindow>>(body, "peak_windows"))
        .or_else(|| check::<BTreeMap<String, u64>>(body, "caps"))
        .or_else(|| check::<u8>(body, "eject_rebuild_percent"))
        .or_else(|| check::<BTreeSet<String>>(body, "ejected"))
        .or_else(|| check::<Option<engine::caps::WindowCaps>>(body, "window_caps"))
        .or_else(|| check::<bool>(body, "draw_log"))
        .unwrap_or_else(|| {
            let message = whole.to_string();
            // "missing field `batch_size`" names its field between backquotes.
            let missing = message.strip_prefix("missing field `").and_then(|rest| rest.split('`').next());
            match missing {
                // A missing field is a malformed body (400), as for every other body.
                Some(field) => ChangeError::Malformed { field: field.to_owned(), rule: "is required".to_owned() },
                None => invalid("snapshot", message.clone()),
            }
        })
}

pub(crate) fn ordering_name(snapshot: &PoolSnapshot) -> String {
    serde_json::to_value(snapshot.ordering).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// What a change to a pool wrote.
#[derive(Debug, Clone)]
pub struct PoolWritten {
    /// The published snapshot's version, audit row and outbox row.
    pub written: Written,
    /// The pool's configuration version after the change (what the next change's
    /// `expected_version` must be). Health changes publish new snapshots but leave it.
    pub config_version: i64,
    /// What the pool now publishes (health applied).
    pub published: PoolSnapshot,
}

/// A change to a published entity: its whole new body, who made it, from where, and why.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    /// `pool:<name>`, `tenant:<name>`, …
    pub entity: &'a str,
    /// What was done, e.g. `pool.weights`, `seed`.
    pub action: &'a str,
    pub actor: &'a str,
    pub source: Source,
    pub reason: Option<&'a str>,
    pub request_id: Option<&'a str>,
    /// The entity's new body (stored as its next snapshot version).
    pub body: &'a serde_json::Value,
    /// Optimistic concurrency: the version the change was made against (0: the entity must
    /// not exist yet). A different current version refuses the change.
    pub expected_version: Option<i64>,
}

/// What a change wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub version: i64,
    pub audit: AuditRow,
    pub outbox_id: i64,
}

/// Writes the change to a pool: its rows, the next snapshot version, an audit row with
/// the previous body as `before`, and an outbox row for the publisher; all or nothing.
/// Tenants, plans and channels change through their own modules.
#[tracing::instrument(skip_all, fields(entity = change.entity, action = change.action), err)]
pub async fn apply_change(db: &PgPool, change: &Change<'_>) -> Result<Applied, ChangeError> {
    let Ok(Entity::Pool(pool)) = Entity::parse(change.entity) else {
        return Err(ChangeError::Invalid {
            field: "entity".into(),
            rule: format!(
                "{:?}: only pools are changed by body; tenants change through their plan, settings and grants",
                change.entity
            ),
        });
    };
    validate_body(change.entity, change.body)?;
    let ctx = crate::change::Ctx {
        actor: change.actor,
        source: change.source,
        reason: change.reason,
        request_id: change.request_id,
    };
    let mut tx = db.begin().await?;
    let written = store::put_pool_tx(&mut tx, &ctx, pool.as_str(), change.action, change.body, change.expected_version)
        .await?
        .written;
    let audit = crate::audit::store::get_audit(&mut tx, written.audit_id).await?;
    tx.commit().await?;
    Ok(Applied { version: written.version, audit, outbox_id: written.outbox_id.unwrap_or_default() })
}

/// The reply to a pool change: `version` is the configuration version (the next change's
/// `expected_version`), `published_version` the snapshot Redis gets.
pub(crate) fn pool_reply(w: &crate::pools::PoolWritten, published: bool) -> PoolWriteReply {
    let mut write = WriteReply::of(std::slice::from_ref(&w.written), published);
    write.version = w.config_version;
    PoolWriteReply { write, published_version: w.written.version, mode: None, rebuilt: None, ejected: None }
}

/// 404 for a pool the configuration does not hold.
pub(crate) fn unknown_pool(pool: &PoolName) -> ApiError {
    ApiError::NotFound(format!("unknown pool {:?}", pool.as_str()))
}
