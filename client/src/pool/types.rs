//! A pool's published configuration, validated: a [`PoolSnapshot`] always describes a pool
//! the engine can build batches for.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use engine::peak::{PeakSchedule, PeakWindow};
use engine::{BatchSize, Ordering, Tier, Weights};
use serde::{Deserialize, Serialize};

use crate::quota::InvalidInput;

/// A pool's name: 1..=64 of `[A-Za-z0-9_-]` (it becomes a Redis hash tag, so no braces).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(pattern = "^[A-Za-z0-9_-]{1,64}$"))]
#[serde(transparent)]
pub struct PoolName(String);

impl PoolName {
    /// Parses a pool name, naming the rule it breaks.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > 64 {
            return Err(InvalidInput::new("pool", format!("must be 1..=64 characters, got {}", raw.len())));
        }
        if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
            return Err(InvalidInput::new(
                "pool",
                format!("may hold only ASCII letters, digits, '_' and '-'; found {bad:?}"),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The name as written in keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for PoolName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The largest peak multiplier a window may apply.
pub const MAX_PEAK_MULTIPLIER: u32 = 1000;

/// The largest batch a pool may use (tickets), and the most tickets a draw skips.
pub const MAX_BATCH: u32 = 100_000;

/// What a pool's tickets name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    /// Tickets are channel codes.
    #[default]
    Channels,
    /// Tickets are tiers G / N / U (the pool's `weights`); each tier has its own channels
    /// (`tiers`), drawn from the tier's own list in the same script.
    Tiers,
}

/// A pool's configuration as published by the control plane, versioned, replaced whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSnapshot {
    /// Snapshot version (≥ 1); an older one never replaces a newer one.
    pub version: u64,
    #[serde(default)]
    pub kind: PoolKind,
    /// Members and their integer weights (zero allowed: never drawn); for a `tiers` pool,
    /// the tiers `G`, `N`, `U` and their weights.
    pub weights: Weights,
    /// A `tiers` pool's channels per tier, with their weights.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tiers: BTreeMap<Tier, Weights>,
    pub batch_size: u32,
    /// Below this many tickets a refill is asked for.
    pub low_water: u32,
    pub ordering: Ordering,
    /// IANA timezone of the pool's day (rotation, caps) and peak windows.
    pub timezone: String,
    #[serde(default)]
    pub peak_windows: Vec<PeakWindow>,
    /// Most draws per member per local day.
    #[serde(default)]
    pub caps: BTreeMap<String, u64>,
    /// Most draws per member per short window of minutes (epoch-aligned), besides `caps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_caps: Option<engine::caps::WindowCaps>,
    /// Whether draws are appended to the pool's draw log (the record traffic replay and the
    /// live longest-run metric read); on unless turned off.
    #[serde(default = "on", skip_serializing_if = "is_on")]
    pub draw_log: bool,
    /// Ejecting members that together hold more than this share of the weight (percent)
    /// rebuilds the pool instead of skipping their tickets.
    pub eject_rebuild_percent: u8,
    /// Members ejected by the control plane (an operator, or health checks): their tickets
    /// are skipped and new batches leave them out. Published with the snapshot, so an
    /// ejection survives a Redis restart.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub ejected: BTreeSet<String>,
}

impl PoolSnapshot {
    /// Checks every rule, naming the field.
    /// Whether each peak window's batch (batch_size × multiplier tickets) fits the largest
    /// batch. Checked where a person writes a pool or its peak windows, not in
    /// [`Self::validate`]: a pool stored before this rule stays publishable, and its refills
    /// cut a peak batch to the largest batch.
    pub fn check_peak_batches(&self) -> Result<(), InvalidInput> {
        for (i, window) in self.peak_windows.iter().enumerate() {
            if u64::from(self.batch_size) * u64::from(window.multiplier()) > u64::from(MAX_BATCH) {
                return Err(InvalidInput::new(
                    format!("peak_windows[{i}].multiplier"),
                    format!(
                        "batch_size × multiplier must be at most {MAX_BATCH} (batch_size {} × {})",
                        self.batch_size,
                        window.multiplier()
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.version == 0 {
            return Err(InvalidInput::new("version", "must be at least 1"));
        }
        match self.kind {
            PoolKind::Channels if !self.tiers.is_empty() => {
                return Err(InvalidInput::new("tiers", "only a pool of kind \"tiers\" has tiers"));
            }
            PoolKind::Channels => {}
            PoolKind::Tiers => {
                for name in self.weights.members() {
                    let tier: Tier = name
                        .parse()
                        .map_err(|e: engine::tier::TierError| InvalidInput::new("weights", e.to_string()))?;
                    if self.weights.weight(self.weights.index_of(name).expect("a member")) > 0
                        && !self.tiers.contains_key(&tier)
                    {
                        return Err(InvalidInput::new("tiers", format!("tier {tier} has weight but no channels")));
                    }
                }
                let mut seen = std::collections::HashSet::new();
                for (tier, channels) in &self.tiers {
                    if self.weights.index_of(tier.as_str()).is_none() {
                        return Err(InvalidInput::new("tiers", format!("tier {tier} is not in weights")));
                    }
                    for name in channels.members() {
                        if !seen.insert(name.as_str()) {
                            return Err(InvalidInput::new(
                                "tiers",
                                format!("channel {name:?} is in more than one tier"),
                            ));
                        }
                    }
                }
            }
        }
        for name in self.channels().members() {
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            {
                return Err(InvalidInput::new("weights", format!("member {name:?} must be 1..=64 of [A-Za-z0-9_.-]")));
            }
        }
        BatchSize::new(u64::from(self.batch_size), MAX_BATCH)
            .map_err(|e| InvalidInput::new("batch_size", e.to_string()))?;
        if self.low_water >= self.batch_size {
            return Err(InvalidInput::new("low_water", "must be below batch_size"));
        }
        self.schedule()?;
        let channels = self.channels();
        // Looked up once per cap, window cap, ejection and override: a set, not a scan.
        let known: std::collections::HashSet<&str> = channels.members().iter().map(String::as_str).collect();
        let own: std::collections::HashSet<&str> = self.weights.members().iter().map(String::as_str).collect();
        for (member, cap) in &self.caps {
            if !known.contains(member.as_str()) {
                return Err(InvalidInput::new("caps", format!("{member:?} is not a member of the pool")));
            }
            if *cap == 0 || *cap > engine::quota::MAX_AMOUNT {
                return Err(InvalidInput::new(
                    "caps",
                    format!("cap of {member:?} must be in 1..={}", engine::quota::MAX_AMOUNT),
                ));
            }
        }
        if let Some(window) = &self.window_caps {
            if !(1..=engine::caps::MAX_WINDOW_MINUTES).contains(&window.minutes) {
                return Err(InvalidInput::new(
                    "window_caps.minutes",
                    format!("must be in 1..={}", engine::caps::MAX_WINDOW_MINUTES),
                ));
            }
            if window.caps.is_empty() {
                return Err(InvalidInput::new(
                    "window_caps.caps",
                    "must name at least one member (or leave window_caps out)",
                ));
            }
            for (member, cap) in &window.caps {
                if !known.contains(member.as_str()) {
                    return Err(InvalidInput::new(
                        "window_caps.caps",
                        format!("{member:?} is not a member of the pool"),
                    ));
                }
                if *cap == 0 || *cap > engine::quota::MAX_AMOUNT {
                    return Err(InvalidInput::new(
                        "window_caps.caps",
                        format!("cap of {member:?} must be in 1..={}", engine::quota::MAX_AMOUNT),
                    ));
                }
            }
        }
        for member in &self.ejected {
            if !known.contains(member.as_str()) {
                return Err(InvalidInput::new("ejected", format!("{member:?} is not a member of the pool")));
            }
        }
        for (i, window) in self.peak_windows.iter().enumerate() {
            if window.multiplier() > MAX_PEAK_MULTIPLIER {
                return Err(InvalidInput::new(
                    format!("peak_windows[{i}].multiplier"),
                    format!("must be in 1..={MAX_PEAK_MULTIPLIER}"),
                ));
            }
            // Overrides name the pool's own members (a tiers pool's tiers), nothing else.
            if let Some(weights) = window.weights() {
                if let Some(stranger) = weights.members().iter().find(|m| !own.contains(m.as_str())) {
                    return Err(InvalidInput::new(
                        format!("peak_windows[{i}].weights"),
                        format!("{stranger:?} is not a member of the pool's weights"),
                    ));
                }
            }
        }
        if self.eject_rebuild_percent == 0 || self.eject_rebuild_percent > 100 {
            return Err(InvalidInput::new("eject_rebuild_percent", "must be in 1..=100"));
        }
        Ok(())
    }

    /// The channels a draw may return, with weights giving each its overall share: the
    /// pool's members, or for a `tiers` pool every tier's channels, each weighted by its
    /// tier's share times its share within the tier (exact integers).
    pub fn channels(&self) -> Weights {
        if self.kind == PoolKind::Channels {
            return self.weights.clone();
        }
        let totals: BTreeMap<Tier, u64> = self.tiers.iter().map(|(t, w)| (*t, w.total().max(1))).collect();
        let mut flat = Vec::new();
        for (tier, channels) in &self.tiers {
            let tier_weight = self.weights.index_of(tier.as_str()).map_or(0, |i| self.weights.weight(i));
            let others: u64 = totals.iter().filter(|(t, _)| *t != tier).fold(1, |p, (_, n)| p.saturating_mul(*n));
            for (name, w) in channels.iter() {
                flat.push((name.to_owned(), tier_weight.saturating_mul(w).saturating_mul(others)));
            }
        }
        Weights::from_integers(flat).map(|w| w.reduced()).unwrap_or_else(|_| self.weights.clone())
    }

    /// The tier of a `tiers` pool that holds `channel`, with that tier's channels.
    pub(crate) fn tier_of(&self, channel: &str) -> Option<(Tier, &Weights)> {
        self.tiers.iter().find(|(_, channels)| channels.index_of(channel).is_some()).map(|(t, w)| (*t, w))
    }

    /// The tiers of a `tiers` pool left with no channel to draw: every channel with a
    /// weight is ejected, or the tier has none. Their lists must hold no tickets, so that
    /// draws map their tier tickets to another tier at once (design.md §3) rather than skip
    /// tickets of ejected channels until the lists drain.
    pub(crate) fn dead_tiers(&self) -> Vec<Tier> {
        if self.kind != PoolKind::Tiers {
            return Vec::new();
        }
        let dead = |tier: &Tier| {
            self.tiers.get(tier).is_none_or(|channels| weighted(channels).all(|c| self.ejected.contains(c)))
        };
        Tier::ALL.into_iter().filter(dead).collect()
    }

    /// Share of the pool's weight its ejected members hold, in percent.
    pub fn ejected_percent(&self) -> f64 {
        let channels = self.channels();
        let out: u64 = self.ejected.iter().filter_map(|m| channels.index_of(m)).map(|i| channels.weight(i)).sum();
        100.0 * out as f64 / channels.total().max(1) as f64
    }

    /// The peak schedule in the pool's timezone.
    pub fn schedule(&self) -> Result<PeakSchedule, InvalidInput> {
        let tz =
            PeakSchedule::parse_timezone(&self.timezone).map_err(|e| InvalidInput::new("timezone", e.to_string()))?;
        PeakSchedule::new(tz, self.peak_windows.clone()).map_err(|e| InvalidInput::new("peak_windows", e.to_string()))
    }

    /// `channels` or `tiers`, as stored.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            PoolKind::Channels => "channels",
            PoolKind::Tiers => "tiers",
        }
    }

    /// The meta hash's fields (besides `version`).
    pub(crate) fn meta_fields(&self) -> Vec<(String, String)> {
        let mut fields = vec![
            ("kind".to_owned(), self.kind_name().to_owned()),
            ("low_water".to_owned(), self.low_water.to_string()),
            ("snapshot".to_owned(), serde_json::to_string(self).expect("a snapshot serialises")),
        ];
        for (member, cap) in &self.caps {
            fields.push((format!("cap:{member}"), cap.to_string()));
        }
        for (member, cap) in self.window_caps.iter().flat_map(|w| &w.caps) {
            fields.push((format!("wcap:{member}"), cap.to_string()));
        }
        // A tiers pool's channels by tier, for the draw script to tell a tier whose every
        // channel is at its cap (or ejected) from one that can serve.
        if self.kind == PoolKind::Tiers {
            for (tier, weights) in &self.tiers {
                fields.push((format!("tm:{}", tier.as_str()), weighted(weights).collect::<Vec<_>>().join(",")));
            }
        }
        fields
    }

    /// The short cap window's length in ms (0: no window caps), as the draw script reads it.
    pub(crate) fn window_ms(&self) -> i64 {
        self.window_caps.as_ref().map_or(0, engine::caps::WindowCaps::length_ms)
    }
}

fn on() -> bool {
    true
}

fn is_on(b: &bool) -> bool {
    *b
}

/// The members of `weights` that have a weight (the ones a batch can hold).
pub(crate) fn weighted(weights: &Weights) -> impl Iterator<Item = &str> + '_ {
    weights.iter().filter(|(_, w)| *w > 0).map(|(m, _)| m)
}
