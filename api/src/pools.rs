//! The replies of the pools' admin routes (`/api/v1/pools…`).

use serde::{Deserialize, Serialize};

use crate::writes::WriteReply;

/// A pool in the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolSummary {
    /// The pool's name.
    pub name: String,
    /// `channels` or `tiers`.
    pub kind: String,
    /// The configuration version (what `expected_version` is checked against).
    pub version: i64,
    /// The newest published snapshot's version.
    pub published_version: i64,
    /// How many members it has.
    pub members: i64,
    /// How many of them are ejected or disabled.
    pub ejected: i64,
    /// The IANA timezone its peak windows are in.
    pub timezone: String,
    /// When its configuration last changed (RFC 3339).
    pub updated_at: String,
}

/// `GET /api/v1/pools`: every pool, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolList {
    /// Every pool, by name.
    pub pools: Vec<PoolSummary>,
}

/// `GET /api/v1/pools/{pool}`: the pool as configured and as last published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolDetail {
    /// The configuration version of `snapshot` (the next change's `expected_version`).
    pub version: i64,
    /// The pool as configured: what `PUT /api/v1/pools/{pool}` takes.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub snapshot: serde_json::Value,
    /// The newest published snapshot's version; null before the first.
    pub published_version: Option<i64>,
    /// The newest published snapshot (disabled channels, pins and health applied); null
    /// before the first.
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Object>))]
    pub published: Option<serde_json::Value>,
}

/// The reply to a change of a pool. `version` is the configuration version (the next
/// change's `expected_version`), `published_version` the snapshot Redis gets. A change of
/// weights, members, peak windows or caps also says how it reached the tickets (`mode`,
/// `rebuilt`) and what the pool now ejects; `PUT /api/v1/pools/{pool}` leaves those out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolWriteReply {
    /// What was written; `version` is the pool's configuration version.
    #[serde(flatten)]
    pub write: WriteReply,
    /// The version of the snapshot published for the change.
    pub published_version: i64,
    /// `drain` or `immediate`: how the change reaches the tickets already in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Whether the remaining tickets were replaced at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<bool>,
    /// The members the pool now publishes as ejected (health and disabled channels
    /// included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ejected: Option<Vec<String>>,
}

/// One recorded configuration version of a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolVersion {
    /// The configuration version.
    pub version: i64,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// Who made it; null for a version recorded after the fact (the pool's configuration
    /// before its history was kept).
    pub actor: Option<String>,
    /// The action that made it (`pool.put`, `pool.weights`, `pool.restore`, …); null likewise.
    pub action: Option<String>,
    /// The pool as configured at this version: what `PUT /api/v1/pools/{pool}` takes.
    #[cfg_attr(feature = "utoipa", schema(value_type = Object))]
    pub snapshot: serde_json::Value,
}

/// `GET /api/v1/pools/{pool}/versions`: the pool's recorded configuration versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolHistory {
    /// The pool's current configuration version.
    pub version: i64,
    /// Every recorded version, newest first.
    pub versions: Vec<PoolVersion>,
}

/// `POST /api/v1/pools/{pool}/restore`: a new configuration version equal to an earlier one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolRestored {
    /// What was written; `version` is the new configuration version.
    #[serde(flatten)]
    pub reply: PoolWriteReply,
    /// The configuration version whose configuration the pool now has again.
    pub restored_from: i64,
    /// The versions made after `restored_from` whose changes the restore undid, oldest first.
    pub undoes: Vec<PoolVersion>,
}

/// `POST /api/v1/pools/{pool}/rebuild`: the remaining tickets were replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolRebuilt {
    /// `pool:<name>`.
    pub entity: String,
    /// The pool's configuration version (unchanged by a rebuild).
    pub version: i64,
    /// The audit row recording the rebuild.
    pub audit_id: i64,
    /// Always true.
    pub rebuilt: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Written;

    fn written() -> WriteReply {
        let w =
            Written { entity: "pool:p".into(), action: "pool.put".into(), version: 7, audit_id: 3, outbox_id: Some(9) };
        WriteReply::of(&[w], true)
    }

    #[test]
    fn a_pool_put_reply_leaves_out_how_it_reached_the_tickets() {
        let reply = PoolWriteReply { write: written(), published_version: 7, mode: None, rebuilt: None, ejected: None };
        let json = serde_json::to_value(&reply).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "entity": "pool:p", "version": 7, "audit_id": 3, "published": true, "published_version": 7,
                "changes": [{"entity": "pool:p", "action": "pool.put", "version": 7, "audit_id": 3, "outbox_id": 9}],
            })
        );
        assert_eq!(serde_json::from_value::<PoolWriteReply>(json).unwrap(), reply);
    }

    #[test]
    fn a_pool_change_reply_says_its_mode_rebuild_and_ejections() {
        let reply = PoolWriteReply {
            write: written(),
            published_version: 8,
            mode: Some("drain".into()),
            rebuilt: Some(false),
            ejected: Some(vec!["A".into()]),
        };
        let json = serde_json::to_value(&reply).unwrap();
        assert_eq!(json["mode"], "drain");
        assert_eq!(json["rebuilt"], false);
        assert_eq!(json["ejected"], serde_json::json!(["A"]));
        assert_eq!(serde_json::from_value::<PoolWriteReply>(json).unwrap(), reply);
    }
}
