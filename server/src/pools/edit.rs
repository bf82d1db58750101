//! Edits of a pool's configuration, as the admin writes and approved change requests make
//! them: what is looked up first (a channel's registration, an earlier version), then one
//! pure step on the configured snapshot, whose own rules are checked after it.

use std::collections::BTreeMap;

use client::pool::{PoolKind, PoolSnapshot};
use engine::{Tier, Weights};
use sqlx::PgConnection;

use crate::channels::ChannelCode;
use crate::error::ApiError;
use crate::error::ChangeError;

/// One edit of a pool's configuration.
#[derive(Debug, Clone)]
pub enum PoolEdit {
    /// New weights (a channels pool's channels, or a tiers pool's tiers).
    Weights(Weights),
    /// A registered channel joins.
    MemberAdd(MemberAdd),
    /// New peak windows.
    PeakWindows(Vec<engine::peak::PeakWindow>),
    /// New per-member daily caps.
    Caps(BTreeMap<String, u64>),
    /// New short-window caps (`None`: none).
    WindowCaps(Option<engine::caps::WindowCaps>),
    /// The whole configuration replaced (a restore of an earlier version).
    Replace(Box<PoolSnapshot>),
}

/// A channel joining a pool, its registration looked up.
#[derive(Debug, Clone)]
pub struct MemberAdd {
    pub code: String,
    pub weight: u64,
    /// The tier asked for (a tiers pool only).
    pub tier: Option<Tier>,
    /// The channel's own tier, if it has one.
    pub channel_tier: Option<Tier>,
    pub daily_cap: Option<u64>,
}

impl MemberAdd {
    /// Looks the channel up (422 naming `channel` when it is not registered); its weight
    /// defaults to the channel's base weight.
    pub async fn resolve(
        conn: &mut PgConnection,
        channel: &ChannelCode,
        weight: Option<u64>,
        tier: Option<Tier>,
        daily_cap: Option<u64>,
    ) -> Result<Self, ApiError> {
        let found = crate::channels::store::channel_in(conn, channel.as_str()).await?.ok_or_else(|| {
            ApiError::Unprocessable {
                field: "channel".into(),
                rule: format!("unknown channel {:?}: register it first", channel.as_str()),
            }
        })?;
        Ok(MemberAdd {
            code: found.code.clone(),
            weight: weight.unwrap_or(found.base_weight as u64),
            tier,
            channel_tier: found.tier.as_deref().and_then(|t| t.parse().ok()),
            daily_cap,
        })
    }
}

impl PoolEdit {
    /// Applies the edit to a configured snapshot; the caller checks the snapshot's rules
    /// after.
    pub fn apply(self, s: &mut PoolSnapshot) -> Result<(), ChangeError> {
        match self {
            PoolEdit::Weights(weights) => set_weights(s, weights),
            PoolEdit::MemberAdd(add) => add_member(s, add)?,
            PoolEdit::PeakWindows(windows) => {
                s.peak_windows = windows;
                s.check_peak_batches().map_err(crate::inputs::from_input)?;
            }
            PoolEdit::Caps(caps) => s.caps = caps,
            PoolEdit::WindowCaps(window) => s.window_caps = window,
            PoolEdit::Replace(snapshot) => *s = *snapshot,
        }
        Ok(())
    }
}

/// A change of a pool's weights: a channels pool's channels (caps and ejections of members
/// that leave go with them), or a tiers pool's tiers.
pub(crate) fn set_weights(s: &mut PoolSnapshot, weights: Weights) {
    if matches!(s.kind, PoolKind::Channels) {
        let stays: std::collections::HashSet<&str> = weights.members().iter().map(String::as_str).collect();
        s.caps.retain(|m, _| stays.contains(m.as_str()));
        s.ejected.retain(|m| stays.contains(m.as_str()));
        if let Some(window) = &mut s.window_caps {
            window.caps.retain(|m, _| stays.contains(m.as_str()));
        }
        if s.window_caps.as_ref().is_some_and(|w| w.caps.is_empty()) {
            s.window_caps = None;
        }
    }
    s.weights = weights;
}

fn add_member(s: &mut PoolSnapshot, add: MemberAdd) -> Result<(), ChangeError> {
    let code = add.code;
    let already = || ChangeError::Invalid { field: "channel".into(), rule: format!("{code:?} is already a member") };
    let with = |weights: &Weights| -> Result<Weights, ChangeError> {
        let mut pairs: Vec<(String, u64)> = weights.iter().map(|(m, w)| (m.to_owned(), w)).collect();
        pairs.push((code.clone(), add.weight));
        Weights::from_integers(pairs).map_err(|e| ChangeError::Invalid { field: "weight".into(), rule: e.to_string() })
    };
    match s.kind {
        PoolKind::Channels => {
            if add.tier.is_some() {
                return Err(ChangeError::Invalid {
                    field: "tier".into(),
                    rule: "only a tiers pool places channels in tiers".into(),
                });
            }
            if s.weights.index_of(&code).is_some() {
                return Err(already());
            }
            s.weights = with(&s.weights)?;
        }
        PoolKind::Tiers => {
            let tier = add.tier.or(add.channel_tier).ok_or_else(|| ChangeError::Invalid {
                field: "tier".into(),
                rule: "is required: the channel has no tier of its own".into(),
            })?;
            if s.channels().index_of(&code).is_some() {
                return Err(already());
            }
            let updated = match s.tiers.get(&tier) {
                Some(existing) => with(existing)?,
                None => Weights::from_integers([(code.clone(), add.weight)])
                    .map_err(|e| ChangeError::Invalid { field: "weight".into(), rule: e.to_string() })?,
            };
            s.tiers.insert(tier, updated);
        }
    }
    if let Some(cap) = add.daily_cap {
        s.caps.insert(code.clone(), cap);
    }
    Ok(())
}
