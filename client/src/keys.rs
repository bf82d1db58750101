//! Redis key names: one [`Keys`] value per configured prefix is the only place they are built.

use std::fmt;

/// The longest prefix accepted; keys stay short enough to read in `redis-cli`.
pub const MAX_PREFIX_LEN: usize = 48;

/// Why a key prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyPrefixError {
    /// The prefix is empty.
    #[error("redis prefix must not be empty")]
    Empty,
    /// The prefix is longer than [`MAX_PREFIX_LEN`] (its length).
    #[error("redis prefix must be at most {MAX_PREFIX_LEN} characters, got {0}")]
    TooLong(usize),
    /// The prefix holds a character outside `[A-Za-z0-9_-]` (the first one).
    #[error("redis prefix may hold only ASCII letters, digits, '_' and '-', found {0:?}")]
    BadCharacter(char),
}

/// The namespace of every key Tessera writes, so several deployments (or test runs) share
/// one Redis without touching each other's keys. Braces and ':' are refused: they would
/// break hash tags and key parsing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Parses a prefix: 1..=48 characters of `[A-Za-z0-9_-]`.
    pub fn parse(raw: &str) -> Result<Self, KeyPrefixError> {
        if raw.is_empty() {
            return Err(KeyPrefixError::Empty);
        }
        if raw.len() > MAX_PREFIX_LEN {
            return Err(KeyPrefixError::TooLong(raw.len()));
        }
        if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
            return Err(KeyPrefixError::BadCharacter(bad));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The prefix as written in keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Builds every Redis key name from one prefix. Keys of one pool share the hash tag
/// `{<pool>}`, keys of one tenant share `{<tenant>}`: a script that touches one pool or one
/// tenant touches one slot and runs on Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: KeyPrefix,
}

impl Keys {
    /// Key names under `prefix`.
    pub fn new(prefix: KeyPrefix) -> Self {
        Self { prefix }
    }

    /// The prefix these keys live under.
    pub fn prefix(&self) -> &KeyPrefix {
        &self.prefix
    }

    /// A `SCAN MATCH` pattern that covers every key under this prefix (used to remove a
    /// test run's or a benchmark's keys without touching anyone else's).
    pub fn scan_pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }

    /// The meta hash holding a pool's published snapshot.
    pub fn pool_meta(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:meta", self.prefix)
    }

    /// A pool's runtime state: batch sequence, apportioner, the current and next local day.
    pub fn pool_state(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:state", self.prefix)
    }

    /// A pool's ticket list.
    pub fn pool_tickets(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:tickets", self.prefix)
    }

    /// A pool's standby batch, promoted when the list runs dry.
    pub fn pool_standby(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:standby", self.prefix)
    }

    /// A `tiers` pool's list of one tier's channels (`G`, `N` or `U`).
    pub fn pool_tier_tickets(&self, pool: &str, tier: &str) -> String {
        format!("{}:pool:{{{pool}}}:tier:{tier}:tickets", self.prefix)
    }

    /// A `tiers` pool's standby batch of one tier.
    pub fn pool_tier_standby(&self, pool: &str, tier: &str) -> String {
        format!("{}:pool:{{{pool}}}:tier:{tier}:standby", self.prefix)
    }

    /// A pool's ejected members.
    pub fn pool_ejected(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:ejected", self.prefix)
    }

    /// A pool's draws per member on one local day (`YYYY-MM-DD`).
    pub fn pool_hits(&self, pool: &str, day: &str) -> String {
        format!("{}:pool:{{{pool}}}:hits:{day}", self.prefix)
    }

    /// A pool's draws per member in one short cap window (starting at `start` ms since the
    /// epoch); expires one window after the window ends.
    pub fn pool_window_hits(&self, pool: &str, start: &str) -> String {
        format!("{}:pool:{{{pool}}}:whits:{start}", self.prefix)
    }

    /// A pool's draw log: a stream of the draw script's calls (`t` when, `m` the members
    /// handed out, in order), drained into Postgres by the control plane.
    pub fn pool_draw_log(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:drawlog", self.prefix)
    }

    /// A pool's refill flag, set by a draw below low-water.
    pub fn pool_refill_flag(&self, pool: &str) -> String {
        format!("{}:pool:{{{pool}}}:refill", self.prefix)
    }

    /// The pub/sub channel on which draws ask for refills (the message is the pool name).
    pub fn pool_refill_channel(&self) -> String {
        format!("{}:pool-refill", self.prefix)
    }

    /// The meta hash holding a route's published snapshot (its rules and version).
    pub fn route_meta(&self, route: &str) -> String {
        format!("{}:route:{{{route}}}:meta", self.prefix)
    }

    /// The meta hash holding a tenant's published quota snapshot.
    pub fn quota_meta(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:meta", self.prefix)
    }

    /// A tenant's reserved amounts per bucket and use per grant.
    pub fn quota_state(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:state", self.prefix)
    }

    /// A tenant's open reservations by request id.
    pub fn quota_ledger(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:ledger", self.prefix)
    }

    /// A tenant's concurrency leases: request id scored by deadline.
    pub fn quota_leases(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:leases", self.prefix)
    }

    /// A tenant's counters of one period (`YYYY-MM`): plan use, requests per day, and
    /// the outcome of each finished reservation; expires after the period's retention.
    pub fn quota_period(&self, tenant: &str, period: &str) -> String {
        format!("{}:quota:{{{tenant}}}:period:{period}", self.prefix)
    }

    /// A tenant's usage stream: every settle, release and expiry, for the usage ledger.
    pub fn quota_usage(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:usage", self.prefix)
    }

    /// The chunks of a tenant's tokens instances hold: holder -> chunk (`lua/chunk_lib.lua`).
    pub fn quota_chunks(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:chunks", self.prefix)
    }

    /// The prefix of a tenant's done markers (the outcome of each finished reservation, so a
    /// repeated call answers as the first one did): the hashes
    /// [`Keys::quota_done_bucket`] for the tenant's idempotency window; before windows,
    /// `<this><request id>` was a key per request.
    pub fn quota_done(&self, tenant: &str) -> String {
        format!("{}:quota:{{{tenant}}}:done:", self.prefix)
    }

    /// One bucket of a tenant's done markers: field `<request id>` of the markers written in
    /// the idempotency window starting at `window_start` (ms since the epoch) by the
    /// counters of generation `gen`, in the window's layout `layout` (a window of `b`
    /// buckets grows to `b * 4^layout` of them when it outgrows its first), for the request
    /// ids whose [`marker_bucket`] (of `b * 4^layout`) it is (`lua/quota_lib.lua` writes and
    /// reads them; `#` and `~` are in no request id).
    pub fn quota_done_bucket(&self, tenant: &str, gen: &str, window_start: i64, layout: u32, bucket: u64) -> String {
        match layout {
            0 => format!("{}#{gen}#{window_start}#{bucket}", self.quota_done(tenant)),
            k => format!("{}#{gen}#{window_start}~{k}#{bucket}", self.quota_done(tenant)),
        }
    }

    /// Every bucket hash of a window of done markers: `buckets` in its first layout, and
    /// every layout up to `layout` it grew to.
    pub fn quota_done_window(&self, tenant: &str, gen: &str, start: i64, buckets: u64, layout: u32) -> Vec<String> {
        (0..=layout)
            .flat_map(|k| (0..marker_buckets(buckets, k)).map(move |b| (k, b)))
            .map(|(k, b)| self.quota_done_bucket(tenant, gen, start, k, b))
            .collect()
    }

    /// The hashes that may hold `request`'s done marker in a window of `buckets` buckets
    /// grown to `layout`: one per layout.
    pub fn quota_done_of(
        &self,
        tenant: &str,
        gen: &str,
        start: i64,
        buckets: u64,
        layout: u32,
        request: &str,
    ) -> Vec<String> {
        (0..=layout)
            .map(|k| self.quota_done_bucket(tenant, gen, start, k, marker_bucket(request, marker_buckets(buckets, k))))
            .collect()
    }

    /// The state fields naming a tenant's two windows of done markers, current and previous:
    /// each `(start, buckets)` field pair (`lua/quota_lib.lua`, "Done markers").
    pub const QUOTA_MARKER_WINDOWS: [(&'static str, &'static str); 2] = [("wc_start", "wc_b"), ("wp_start", "wp_b")];

    /// The state fields recording the windows' newest layouts, each `start * 16 + layout`
    /// (read them with [`marker_layout`]).
    pub const QUOTA_MARKER_LAYOUTS: [&'static str; 2] = ["wc_k", "wp_k"];

    /// The tenant named by one of its quota keys under this prefix.
    pub fn tenant_of_quota_key<'k>(&self, key: &'k str) -> Option<&'k str> {
        let rest = key.strip_prefix(self.prefix.as_str())?.strip_prefix(":quota:{")?;
        rest.split_once('}').map(|(tenant, _)| tenant)
    }

    /// A channel's outcome counters per minute (`<minute>:ok`, `:fail`, `:lat_ms`, `:lat_n`),
    /// reported by applications and read by the health evaluation.
    pub fn health(&self, channel: &str) -> String {
        format!("{}:health:{{{channel}}}", self.prefix)
    }
}

/// The bucket of a window's done markers that holds `request`'s, of `buckets` (the window's
/// count): the same hash of the id as `id_hash` in `lua/quota_lib.lua`.
pub fn marker_bucket(request: &str, buckets: u64) -> u64 {
    request.bytes().fold(0u64, |h, b| (h * 31 + u64::from(b)) % 16_777_213) % buckets.max(1)
}

/// The newest layout of the window of done markers starting at `start`, from the values of
/// the state's [`Keys::QUOTA_MARKER_LAYOUTS`] fields: the one naming that window, else 0.
pub fn marker_layout(start: i64, records: &[Option<i64>]) -> u32 {
    records.iter().flatten().find(|v| **v > 0 && v.div_euclid(16) == start).map_or(0, |v| v.rem_euclid(16) as u32)
}

/// The buckets of layout `layout` of a window of `buckets` (four times as many per layout).
fn marker_buckets(buckets: u64, layout: u32) -> u64 {
    buckets.saturating_mul(4u64.saturating_pow(layout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_with_a_brace_or_colon_is_refused_by_name() {
        assert_eq!(KeyPrefix::parse("a{b"), Err(KeyPrefixError::BadCharacter('{')));
        assert_eq!(KeyPrefix::parse("a:b"), Err(KeyPrefixError::BadCharacter(':')));
        assert_eq!(KeyPrefix::parse(""), Err(KeyPrefixError::Empty));
        assert_eq!(KeyPrefix::parse(&"x".repeat(49)), Err(KeyPrefixError::TooLong(49)));
    }

    #[test]
    fn keys_of_one_pool_share_one_hash_tag() {
        let keys = Keys::new(KeyPrefix::parse("tessera").unwrap());
        assert_eq!(keys.pool_meta("cn-pay"), "tessera:pool:{cn-pay}:meta");
        assert_eq!(keys.quota_meta("acme"), "tessera:quota:{acme}:meta");
        assert_eq!(keys.route_meta("checkout"), "tessera:route:{checkout}:meta");
        assert_eq!(keys.scan_pattern(), "tessera:*");
        assert_eq!(keys.quota_period("acme", "2026-11"), "tessera:quota:{acme}:period:2026-11");
        assert_eq!(keys.tenant_of_quota_key(&keys.quota_leases("acme")), Some("acme"));
        assert_eq!(keys.tenant_of_quota_key("other:quota:{acme}:leases"), None);
        assert_eq!(keys.health("ALIPAY_A"), "tessera:health:{ALIPAY_A}");
        assert_eq!(keys.quota_done("acme"), "tessera:quota:{acme}:done:");
    }
}
