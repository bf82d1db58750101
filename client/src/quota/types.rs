//! Validated quota inputs: a value of these types always holds something Redis may see.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use engine::quota::MAX_AMOUNT;
use serde::{Deserialize, Serialize};

/// Why an input was refused: the field and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct InvalidInput {
    /// The field, as named in the API (`tokens`, `request_id`, `grants[1].expires_at`, …).
    pub field: String,
    /// What the value must be.
    pub rule: String,
}

impl InvalidInput {
    /// A refusal of `field` for breaking `rule`.
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { field: field.into(), rule: rule.into() }
    }
}

fn identifier(field: &str, raw: &str, max: usize, extra: &[char]) -> Result<String, InvalidInput> {
    if raw.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if raw.len() > max {
        return Err(InvalidInput::new(field, format!("must be at most {max} characters, got {}", raw.len())));
    }
    if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || extra.contains(c)))
    {
        let allowed: String = extra.iter().map(|c| format!(" '{c}'")).collect();
        return Err(InvalidInput::new(
            field,
            format!("may hold only ASCII letters, digits, '_', '-'{allowed}; found {bad:?}"),
        ));
    }
    Ok(raw.to_owned())
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:literal, [$($extra:literal),*], $pattern:tt) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(pattern = $pattern))]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parses the value, naming the field and the rule when it is refused.
            pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
                identifier($field, raw, $max, &[$($extra),*]).map(Self)
            }

            /// The value as written in keys and replies.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_id!(
    /// A tenant's name: 1..=64 of `[A-Za-z0-9_-]` (it becomes a Redis hash tag, so no braces).
    TenantId, "tenant", 64, [], "^[A-Za-z0-9_-]{1,64}$"
);
string_id!(
    /// The caller's id for one request: 1..=128 of `[A-Za-z0-9_.:-]` (a UUID fits). The same
    /// id makes a retried reserve, settle or release change nothing more.
    RequestId, "request_id", 128, ['.', ':'], "^[A-Za-z0-9_.:-]{1,128}$"
);

/// A grant's id: 1..=64 of `[A-Za-z0-9_-]`, never `plan` (the plan bucket's name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct GrantId(String);

impl GrantId {
    /// Parses a grant id.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        let id = identifier("grant.id", raw, 64, &[])?;
        if id == "plan" {
            return Err(InvalidInput::new("grant.id", "must not be \"plan\", the plan bucket's name"));
        }
        Ok(Self(id))
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for GrantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

fn amount(field: &str, value: i128, min: u64) -> Result<u64, InvalidInput> {
    if value < min as i128 || value > MAX_AMOUNT as i128 {
        return Err(InvalidInput::new(
            field,
            format!("must be an integer in {min}..={MAX_AMOUNT} (2^53 - 1), got {value}"),
        ));
    }
    Ok(value as u64)
}

/// A positive token amount, `1..=2^53-1` (Lua holds amounts as doubles, exact to 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(example = 1200))]
#[serde(transparent)]
pub struct Tokens(u64);

impl Tokens {
    /// Parses an amount of the field `field`.
    pub fn parse(field: &str, value: i128) -> Result<Self, InvalidInput> {
        amount(field, value, 1).map(Self)
    }

    /// The amount.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// Reads any JSON integer (serde_json's `Value` does not hand out i128) as an i128.
struct IntegerVisitor;

impl serde::de::Visitor<'_> for IntegerVisitor {
    type Value = i128;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i128, E> {
        Ok(v.into())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i128, E> {
        Ok(v.into())
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<i128, E> {
        Ok(v)
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<i128, E> {
        Ok(i128::try_from(v).unwrap_or(i128::MAX))
    }

    /// JSON Schema counts `4865.0` as the integer 4865: an integral float is taken exactly,
    /// anything with a fraction is refused.
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i128, E> {
        exact_integer(v).ok_or_else(|| E::invalid_type(serde::de::Unexpected::Float(v), &self))
    }
}

/// An integral float as the integer it is (`4865.0` → 4865); `None` for a fraction, NaN or
/// infinity. Values beyond ±2^127 saturate, which every range check then refuses.
pub fn exact_integer(v: f64) -> Option<i128> {
    (v.is_finite() && v.fract() == 0.0).then_some(v as i128)
}

fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
    d.deserialize_any(IntegerVisitor)
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse("tokens", integer(d)?).map_err(serde::de::Error::custom)
    }
}

/// A token count that may be zero, `0..=2^53-1` (actual use of a request that produced nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema), schema(example = 950))]
#[serde(transparent)]
pub struct TokenCount(u64);

impl TokenCount {
    /// Parses a count of the field `field`.
    pub fn parse(field: &str, value: i128) -> Result<Self, InvalidInput> {
        amount(field, value, 0).map(Self)
    }

    /// The count.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for TokenCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse("tokens", integer(d)?).map_err(serde::de::Error::custom)
    }
}

/// What a grant is: both kinds pay before the plan (design.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum GrantKind {
    /// Pays after every bonus, soonest expiry first.
    Temporary,
    /// Pays first, lower `priority` first, then soonest expiry.
    Bonus { priority: u32 },
}

/// A temporary or bonus grant of tokens, live in `[starts_at, expires_at)`. Its use is
/// counted over its whole life, not per period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: GrantId,
    #[serde(flatten)]
    pub kind: GrantKind,
    pub amount: Tokens,
    pub starts_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a client does for a tenant while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum FallbackPolicy {
    /// Refuse every reservation (the default: no admission goes uncounted).
    FailClosed,
    /// Admit up to `allowance` tokens per client while Redis is away, remember each
    /// admission, and charge them all to Redis once it answers again.
    FailOpenLimited { allowance: Tokens },
}

impl FallbackPolicy {
    /// The name used in metrics, logs and the meta hash.
    pub fn name(&self) -> &'static str {
        match self {
            Self::FailClosed => "fail_closed",
            Self::FailOpenLimited { .. } => "fail_open_limited",
        }
    }
}

/// The longest reservation allowed before the sweeper returns it: one day.
pub const MAX_RESERVATION_TTL: Duration = Duration::from_secs(24 * 3600);

/// A tenant's quota configuration as published to Redis by the control plane: a
/// snapshot, versioned, replaced whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantQuota {
    /// Snapshot version (≥ 1); an older one never replaces a newer one.
    pub version: u64,
    /// The plan's tokens per month (UTC calendar month).
    pub monthly_tokens: TokenCount,
    /// Requests admitted per UTC day.
    pub daily_requests: u64,
    /// Reservations open at once.
    pub concurrency: u32,
    /// Temporary and bonus grants, each with its own life.
    pub grants: Vec<Grant>,
    /// How long a reservation stays open before the sweeper returns it.
    #[serde(with = "millis")]
    pub reservation_ttl: Duration,
    /// Days a period's counters are kept after the period ends.
    pub retention_days: u32,
    /// How long Redis answers a repeated reserve, settle or release of a finished
    /// reservation itself (its done marker); after that, the usage ledger answers.
    #[serde(with = "millis", default = "default_idempotency_window")]
    pub idempotency_window: Duration,
    /// What clients do while Redis is unreachable.
    pub fallback: FallbackPolicy,
}

/// The idempotency window unless a tenant sets its own: an hour.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(3600);
/// The shortest idempotency window: a minute.
pub const MIN_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(60);
/// The longest idempotency window: 400 days.
pub const MAX_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(400 * 86_400);

fn default_idempotency_window() -> Duration {
    DEFAULT_IDEMPOTENCY_WINDOW
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

impl TenantQuota {
    /// Checks the rules no single field can: unique grant ids, a grant's window, limits.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.version == 0 {
            return Err(InvalidInput::new("version", "must be at least 1"));
        }
        if self.daily_requests as u128 > MAX_AMOUNT as u128 {
            return Err(InvalidInput::new("daily_requests", format!("must be at most {MAX_AMOUNT}")));
        }
        if self.reservation_ttl.is_zero() || self.reservation_ttl > MAX_RESERVATION_TTL {
            return Err(InvalidInput::new("reservation_ttl_ms", "must be in 1..=86400000 (one day)"));
        }
        if self.retention_days == 0 || self.retention_days > 3660 {
            return Err(InvalidInput::new("retention_days", "must be in 1..=3660"));
        }
        if self.idempotency_window < MIN_IDEMPOTENCY_WINDOW || self.idempotency_window > MAX_IDEMPOTENCY_WINDOW {
            return Err(InvalidInput::new(
                "idempotency_window_ms",
                format!(
                    "must be in {}..={} (a minute to 400 days)",
                    MIN_IDEMPOTENCY_WINDOW.as_millis(),
                    MAX_IDEMPOTENCY_WINDOW.as_millis()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, grant) in self.grants.iter().enumerate() {
            if !seen.insert(grant.id.as_str()) {
                return Err(InvalidInput::new(
                    format!("grants[{i}].id"),
                    format!("duplicate grant id {:?}", grant.id.as_str()),
                ));
            }
            if let (Some(starts), Some(expires)) = (grant.starts_at, grant.expires_at) {
                if expires <= starts {
                    return Err(InvalidInput::new(format!("grants[{i}].expires_at"), "must be after starts_at"));
                }
            }
        }
        Ok(())
    }

    /// The meta hash's fields (besides `version`), as the scripts read them.
    pub(crate) fn meta_fields(&self) -> Vec<(&'static str, String)> {
        let grants: Vec<serde_json::Value> = self
            .grants
            .iter()
            .map(|g| {
                let (kind, priority) = match g.kind {
                    GrantKind::Temporary => ("temporary", 0),
                    GrantKind::Bonus { priority } => ("bonus", priority),
                };
                serde_json::json!({
                    "id": g.id.as_str(),
                    "kind": kind,
                    "priority": priority,
                    "amount": g.amount.get(),
                    "starts_at_ms": g.starts_at.map(|t| t.timestamp_millis()),
                    "expires_at_ms": g.expires_at.map(|t| t.timestamp_millis()),
                })
            })
            .collect();
        let allowance = match self.fallback {
            FallbackPolicy::FailClosed => 0,
            FallbackPolicy::FailOpenLimited { allowance } => allowance.get(),
        };
        vec![
            ("monthly_tokens", self.monthly_tokens.get().to_string()),
            ("daily_requests", self.daily_requests.to_string()),
            ("concurrency", self.concurrency.to_string()),
            ("grants", serde_json::Value::Array(grants).to_string()),
            ("reservation_ttl_ms", (self.reservation_ttl.as_millis() as u64).to_string()),
            ("retention_days", self.retention_days.to_string()),
            ("idempotency_window_ms", (self.idempotency_window.as_millis() as u64).to_string()),
            ("policy", self.fallback.name().to_owned()),
            ("fallback_allowance", allowance.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_outside_one_to_two_pow_53_minus_one_are_refused_naming_the_field() {
        assert!(Tokens::parse("tokens", 1).is_ok());
        assert!(Tokens::parse("tokens", MAX_AMOUNT as i128).is_ok());
        let err = Tokens::parse("tokens", 1i128 << 53).unwrap_err();
        assert_eq!(err.field, "tokens");
        assert!(err.rule.contains("2^53 - 1"), "{err}");
        assert!(Tokens::parse("tokens", 0).is_err());
        assert!(Tokens::parse("tokens", -5).is_err());
        assert!(TokenCount::parse("actual_tokens", 0).is_ok());
    }

    #[test]
    fn an_integral_float_is_the_integer_it_writes_and_a_fraction_is_refused() {
        let tokens: Tokens = serde_json::from_str("4865.0").unwrap();
        assert_eq!(tokens.get(), 4865);
        let count: TokenCount = serde_json::from_str("0.0").unwrap();
        assert_eq!(count.get(), 0);
        assert!(serde_json::from_str::<Tokens>("4865.5").is_err());
        assert!(serde_json::from_str::<Tokens>("1e300").is_err(), "far above 2^53 - 1");
    }

    #[test]
    fn ids_refuse_braces_and_the_plan_name() {
        assert!(TenantId::parse("acme{x}").is_err());
        assert!(TenantId::parse(&"a".repeat(65)).is_err());
        assert!(RequestId::parse("6f1c1e9e-2a55-4c1f-9d0c-8b6b1b1e0a11").is_ok());
        assert!(RequestId::parse("a b").is_err());
        assert_eq!(GrantId::parse("plan").unwrap_err().field, "grant.id");
    }

    #[test]
    fn a_tokens_value_deserialises_only_when_valid() {
        assert!(serde_json::from_str::<Tokens>("9007199254740992").is_err());
        assert!(serde_json::from_str::<Tokens>("-1").is_err());
        assert!(serde_json::from_str::<Tokens>("1.5").is_err());
        assert_eq!(serde_json::from_str::<Tokens>("42").unwrap().get(), 42);
        assert_eq!(serde_json::from_value::<Tokens>(serde_json::json!(42)).unwrap().get(), 42);
        assert!(serde_json::from_value::<TokenCount>(serde_json::json!(-1)).is_err());
    }
}
