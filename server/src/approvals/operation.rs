//! The operations a change request carries: each the body of the direct write it stands
//! for (without `reason` and `expected_version`, which are the request's), tagged by
//! `kind`, the audit action it is written as once applied.

use std::collections::BTreeMap;

use client::pool::{PoolName, PoolSnapshot, ReweightMode};
use engine::{Tier, Weights};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;

use crate::channels::ChannelCode;
use crate::error::ApiError;
use crate::pools::edit::{MemberAdd, PoolEdit};

/// One operation on a pool, as the direct write's body.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum Operation {
    /// `POST /api/v1/pools/{pool}/weights`: new weights, `drain` or `immediate`.
    #[serde(rename = "pool.weights")]
    Weights {
        #[schema(value_type = Vec<crate::schema::WeightEntry>, min_items = 1)]
        weights: Weights,
        #[schema(value_type = crate::schema::ReweightMode)]
        mode: ReweightMode,
    },
    /// `POST /api/v1/pools/{pool}/members`: a registered channel joins.
    #[serde(rename = "pool.member_add")]
    MemberAdd {
        #[schema(value_type = String, pattern = "^[A-Za-z0-9_.-]{1,64}$")]
        channel: ChannelCode,
        /// Default: the channel's base weight.
        #[serde(
            default,
            deserialize_with = "crate::inputs::optional_integer",
            skip_serializing_if = "Option::is_none"
        )]
        weight: Option<u64>,
        /// A tiers pool's tier for it; default: the channel's own tier.
        #[schema(value_type = Option<crate::schema::Tier>)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tier: Option<Tier>,
        /// Most draws per local day.
        #[schema(minimum = 1)]
        #[serde(
            default,
            deserialize_with = "crate::inputs::optional_integer",
            skip_serializing_if = "Option::is_none"
        )]
        daily_cap: Option<u64>,
    },
    /// `PUT /api/v1/pools/{pool}/peak_windows`: new peak windows.
    #[serde(rename = "pool.peak_windows")]
    PeakWindows {
        #[schema(value_type = Vec<crate::schema::PeakWindowEntry>)]
        peak_windows: Vec<engine::peak::PeakWindow>,
    },
    /// `PUT /api/v1/pools/{pool}/caps`: new per-member daily caps.
    #[serde(rename = "pool.caps")]
    Caps {
        #[serde(deserialize_with = "crate::inputs::integer_values")]
        #[schema(value_type = BTreeMap<String, crate::schema::Cap>)]
        caps: BTreeMap<String, u64>,
    },
    /// `PUT /api/v1/pools/{pool}/window_caps`: new short-window caps (`null`: none).
    #[serde(rename = "pool.window_caps")]
    WindowCaps {
        #[schema(value_type = Option<crate::schema::WindowCapsEntry>)]
        window_caps: Option<engine::caps::WindowCaps>,
    },
    /// `POST /api/v1/pools/{pool}/restore`: a new version equal to an earlier one.
    #[serde(rename = "pool.restore_version")]
    RestoreVersion {
        /// The configuration version to return to.
        #[schema(minimum = 1)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        version: i64,
    },
    /// `POST /api/v1/pools/{pool}/ramps`: a ramp from the pool's weights now to the plan's
    /// target; approved once, its steps then run without further approval.
    #[serde(rename = "pool.ramp")]
    Ramp { plan: crate::ramps::PlanInput },
    /// `POST /api/v1/channels` (entity `channel:<code>`): a channel registered.
    #[serde(rename = "channel.create")]
    ChannelCreate {
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
        )]
        name: String,
        #[schema(value_type = Option<crate::schema::Tier>)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tier: Option<Tier>,
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        base_weight: u64,
        /// Whether pools draw it (default true).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        enabled: Option<bool>,
    },
    /// `PUT /api/v1/channels/{code}`: a channel's name, tier and base weight.
    #[serde(rename = "channel.update")]
    ChannelUpdate {
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
        )]
        name: String,
        #[schema(value_type = Option<crate::schema::Tier>)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tier: Option<Tier>,
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        base_weight: u64,
    },
    /// `POST /api/v1/plans` (entity `plan:<name>`): a plan created.
    #[serde(rename = "plan.create")]
    PlanCreate {
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        monthly_tokens: u64,
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        daily_requests: u64,
        #[schema(maximum = 2147483647)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        concurrency: u32,
    },
    /// `PUT /api/v1/plans/{plan}`: a plan's limits (its tenants republished).
    #[serde(rename = "plan.update")]
    PlanUpdate {
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        monthly_tokens: u64,
        #[schema(maximum = 9007199254740991_u64)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        daily_requests: u64,
        #[schema(maximum = 2147483647)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        concurrency: u32,
    },
    /// `POST /api/v1/plans/{plan}/restore`: a plan's limits of an earlier version.
    #[serde(rename = "plan.restore_version")]
    PlanRestoreVersion {
        #[schema(minimum = 1)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        version: i64,
    },
    /// `PUT /api/v1/tenants/{tenant}` (entity `tenant:<name>`): a tenant's plan and settings.
    #[serde(rename = "tenant.put")]
    TenantPut {
        #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
        plan: String,
        #[schema(minimum = 1, maximum = 86400000)]
        #[serde(
            default,
            deserialize_with = "crate::inputs::optional_integer",
            skip_serializing_if = "Option::is_none"
        )]
        reservation_ttl_ms: Option<i64>,
        #[schema(minimum = 1, maximum = 3660)]
        #[serde(
            default,
            deserialize_with = "crate::inputs::optional_integer",
            skip_serializing_if = "Option::is_none"
        )]
        retention_days: Option<i64>,
        #[schema(minimum = 60000, maximum = 34560000000_i64)]
        #[serde(
            default,
            deserialize_with = "crate::inputs::optional_integer",
            skip_serializing_if = "Option::is_none"
        )]
        idempotency_window_ms: Option<i64>,
        #[schema(value_type = Option<crate::schema::Fallback>)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<Value>,
    },
    /// `POST /api/v1/tenants/{tenant}/restore`: a tenant's plan and settings of an earlier
    /// version.
    #[serde(rename = "tenant.restore_version")]
    TenantRestoreVersion {
        #[schema(minimum = 1)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        version: i64,
    },
    /// `PUT /api/v1/routes/{route}` (entity `route:<name>`): a route's rules and default
    /// pool, created (version 0) or replaced.
    #[serde(rename = "route.put")]
    RoutePut {
        #[schema(value_type = Vec<crate::schema::RouteRule>, max_items = 200)]
        rules: Value,
        #[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$")]
        default_pool: Value,
    },
    /// `POST /api/v1/routes/{route}/restore`: a route's rules of an earlier version.
    #[serde(rename = "route.restore_version")]
    RouteRestoreVersion {
        #[schema(minimum = 1)]
        #[serde(deserialize_with = "crate::inputs::integer")]
        version: i64,
    },
}

impl Operation {
    /// The audit action of the write it makes.
    pub fn action(&self) -> &'static str {
        match self {
            Operation::Weights { .. } => "pool.weights",
            Operation::MemberAdd { .. } => "pool.member_add",
            Operation::PeakWindows { .. } => "pool.peak_windows",
            Operation::Caps { .. } => "pool.caps",
            Operation::WindowCaps { .. } => "pool.window_caps",
            Operation::RestoreVersion { .. } => "pool.restore_version",
            Operation::Ramp { .. } => "pool.ramp",
            Operation::ChannelCreate { .. } => "channel.create",
            Operation::ChannelUpdate { .. } => "channel.update",
            Operation::PlanCreate { .. } => "plan.create",
            Operation::PlanUpdate { .. } => "plan.update",
            Operation::PlanRestoreVersion { .. } => "plan.restore_version",
            Operation::TenantPut { .. } => "tenant.put",
            Operation::TenantRestoreVersion { .. } => "tenant.restore_version",
            Operation::RoutePut { .. } => "route.put",
            Operation::RouteRestoreVersion { .. } => "route.restore_version",
        }
    }

    /// The kind of entity it changes: `pool`, `channel`, `plan`, `tenant` or `route`.
    pub fn entity_kind(&self) -> &'static str {
        self.action().split('.').next().unwrap_or("pool")
    }

    /// How it reaches the tickets already in the pool: a weights change says; every other
    /// change drains.
    pub fn mode(&self) -> ReweightMode {
        match self {
            Operation::Weights { mode, .. } => *mode,
            Operation::Ramp { plan } => plan.mode.unwrap_or(ReweightMode::Drain),
            _ => ReweightMode::Drain,
        }
    }

    /// The operation with the defaults `edit` looked up written out (a new member's weight,
    /// and its tier in a tiers pool), so that what is applied later is what reviewers saw,
    /// whatever the channel registry says by then.
    pub fn pinned(&self, edit: &PoolEdit, pool: &PoolSnapshot) -> Operation {
        match (self, edit) {
            (Operation::MemberAdd { channel, daily_cap, tier, .. }, PoolEdit::MemberAdd(add)) => {
                let tier = match pool.kind {
                    client::pool::PoolKind::Tiers => tier.or(add.channel_tier),
                    client::pool::PoolKind::Channels => *tier,
                };
                Operation::MemberAdd { channel: channel.clone(), weight: Some(add.weight), tier, daily_cap: *daily_cap }
            }
            _ => self.clone(),
        }
    }

    /// A stored operation (what [`Serialize`] wrote).
    pub fn from_stored(id: i64, stored: &Value) -> Result<Self, ApiError> {
        serde_json::from_value(stored.clone())
            .map_err(|e| ApiError::Unexpected(anyhow::anyhow!("change request {id}: operation: {e}")))
    }
}

/// What an operation does to `pool` (at configuration version `current`, configured as
/// `current_body`), looked up now, in the caller's transaction: the edit, and for a
/// restore the versions it undoes. Refused as the direct write would refuse it.
pub(crate) async fn resolve(
    tx: &mut PgConnection,
    pool: &PoolName,
    operation: &Operation,
    current: i64,
    current_body: &Value,
) -> Result<(PoolEdit, Option<Vec<api::pools::PoolVersion>>), ApiError> {
    Ok(match operation {
        Operation::Weights { weights, .. } => (PoolEdit::Weights(weights.clone()), None),
        Operation::MemberAdd { channel, weight, tier, daily_cap } => {
            (PoolEdit::MemberAdd(MemberAdd::resolve(tx, channel, *weight, *tier, *daily_cap).await?), None)
        }
        Operation::PeakWindows { peak_windows } => (PoolEdit::PeakWindows(peak_windows.clone()), None),
        Operation::Caps { caps } => (PoolEdit::Caps(caps.clone()), None),
        Operation::WindowCaps { window_caps } => (PoolEdit::WindowCaps(window_caps.clone()), None),
        Operation::Ramp { plan } => {
            // Checked as the ramp would start now; reviewers see the baseline and the target.
            let snapshot = crate::pools::parse_pool_body(current_body)?;
            crate::ramps::plan::check_steps(&plan.parse(&snapshot.weights)?, &snapshot)?;
            (PoolEdit::Weights(plan.target.clone()), None)
        }
        Operation::RestoreVersion { version } => {
            let (body, undoes) =
                crate::pools::history::store::restored(tx, pool, *version, current, current_body).await?;
            let snapshot: PoolSnapshot = crate::pools::parse_pool_body(&body)?;
            (PoolEdit::Replace(Box::new(snapshot)), Some(undoes))
        }
        other => {
            return Err(ApiError::Unprocessable {
                field: "operation".into(),
                rule: format!("{} changes a {}, not a pool", other.action(), other.entity_kind()),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_parse_as_the_direct_writes_bodies_and_refuse_strangers() {
        let weights: Operation = serde_json::from_value(serde_json::json!(
            {"kind": "pool.weights", "weights": [{"member": "A", "weight": 1}], "mode": "drain"}
        ))
        .unwrap();
        assert_eq!(weights.action(), "pool.weights");
        let stored = serde_json::to_value(&weights).unwrap();
        assert_eq!(stored["kind"], "pool.weights");
        assert_eq!(Operation::from_stored(1, &stored).unwrap().action(), "pool.weights");
        let add: Operation =
            serde_json::from_value(serde_json::json!({"kind": "pool.member_add", "channel": "C"})).unwrap();
        assert_eq!(add.mode(), ReweightMode::Drain);
        assert_eq!(serde_json::to_value(&add).unwrap(), serde_json::json!({"kind": "pool.member_add", "channel": "C"}));
        for bad in [
            serde_json::json!({"kind": "pool.caps", "caps": {"A": 1}, "extra": 1}),
            serde_json::json!({"kind": "pool.nothing"}),
            serde_json::json!({"kind": "pool.restore_version", "version": 1.5}),
            serde_json::json!({"kind": "pool.caps", "caps": {"A": -1}}),
        ] {
            assert!(serde_json::from_value::<Operation>(bad.clone()).is_err(), "{bad}");
        }
    }
}
