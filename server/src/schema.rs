//! Schemas that exist only for the OpenAPI document: the shapes of engine types (which stay
//! free of utoipa) and of enumerations the handlers take as strings. Below the routes: route
//! modules and [`crate::openapi`] both use them.

use std::collections::BTreeMap;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::error::{ConflictBody, ErrorBody, QuotaRefusedBody};

/// One member of a pool's weights as the admin API takes and gives them:
/// `[{"member": "A", "weight": 45}, …]`, members unique and non-empty, at least one weight
/// positive, the total at most 2^53 − 1. Describes `engine::Weights` (which stays free of
/// utoipa): `#[schema(value_type = Vec<crate::schema::WeightEntry>)]`.
#[derive(utoipa::ToSchema)]
pub struct WeightEntry {
    /// The member (a channel code, or a tier `G`/`N`/`U` in a `tiers` pool): not blank.
    #[schema(min_length = 1, pattern = "\\S", example = "A")]
    pub member: String,
    /// Its integer weight, 0..=2^53−1 (0: never drawn).
    #[schema(maximum = 9007199254740991_u64, example = 45)]
    pub weight: u64,
}

/// A pool as `PUT /api/v1/pools/{pool}` takes it: a snapshot without `version`. Describes
/// `client::pool::PoolSnapshot`. Rules across fields are checked by the server and refused
/// with a 422 naming the field: members are registered channels (of the tier, in a tiers
/// pool) and unique, not every weight 0, `low_water` below `batch_size`, `caps` and
/// `ejected` name members, a tiers pool's weights name tiers that have channels.
#[derive(utoipa::ToSchema)]
pub struct PoolSnapshotBody {
    /// `channels` (the default: tickets are channel codes) or `tiers` (tickets are tiers).
    #[schema(value_type = PoolKind, required = false)]
    pub kind: Option<PoolKind>,
    /// The members (a channels pool's channels, a tiers pool's tiers) and their weights.
    #[schema(min_items = 1)]
    pub weights: Vec<WeightEntry>,
    /// A tiers pool's channels per tier (`G`, `N`, `U`), with their weights.
    #[schema(value_type = BTreeMap<String, Vec<WeightEntry>>, required = false)]
    pub tiers: Option<BTreeMap<String, Vec<WeightEntry>>>,
    /// Tickets per batch, 1..=100000.
    #[schema(minimum = 1, maximum = 100000)]
    pub batch_size: u32,
    /// Below this many tickets a refill is asked for; below `batch_size`.
    #[schema(maximum = 99999)]
    pub low_water: u32,
    pub ordering: Ordering,
    /// IANA timezone of the pool's day (rotation, caps) and peak windows.
    #[schema(example = "Europe/Paris")]
    pub timezone: String,
    #[schema(value_type = Vec<PeakWindowEntry>, required = false)]
    pub peak_windows: Option<Vec<PeakWindowEntry>>,
    /// Most draws per member per local day, 1..=2^53−1 each.
    #[schema(value_type = BTreeMap<String, Cap>, required = false)]
    pub caps: Option<BTreeMap<String, u64>>,
    /// Ejecting members that together hold more than this share of the weight (percent,
    /// 1..=100) rebuilds the pool instead of skipping their tickets.
    #[schema(minimum = 1, maximum = 100)]
    pub eject_rebuild_percent: u8,
    /// Members ejected by the control plane.
    #[schema(value_type = Vec<String>, required = false)]
    pub ejected: Option<Vec<String>>,
}

/// A pool's health thresholds: overrides of the defaults; a field left out takes its
/// default. Describes `engine::health::Policy`.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthPolicy {
    /// Minutes of outcomes judged at once, 1..=60.
    #[schema(value_type = u32, required = false, minimum = 1, maximum = 60)]
    pub window_minutes: Option<u32>,
    /// Fewer outcomes than this in a window: no decision; 1..=2^53−1.
    #[schema(value_type = u64, required = false, minimum = 1, maximum = 9007199254740991_u64)]
    pub min_volume: Option<u64>,
    /// A window below this success rate fails, 0..=1.
    #[schema(value_type = f64, required = false, minimum = 0, maximum = 1)]
    pub min_success_rate: Option<f64>,
    /// A failing window multiplies the factor by this, in (0, 1).
    #[schema(value_type = f64, required = false, exclusive_minimum = 0, exclusive_maximum = 1)]
    pub decay_factor: Option<f64>,
    /// At most one decay per this many ms, 0..=86400000.
    #[schema(value_type = i64, required = false, minimum = 0, maximum = 86400000)]
    pub cooldown_ms: Option<i64>,
    /// Below this factor (share of the base weight) the member is ejected, in (0, 1).
    #[schema(value_type = f64, required = false, exclusive_minimum = 0, exclusive_maximum = 1)]
    pub eject_below: Option<f64>,
    /// Never more than this share (percent) of a pool's base weight ejected at once, 0..=100.
    #[schema(value_type = f64, required = false, minimum = 0, maximum = 100)]
    pub max_ejected_percent: Option<f64>,
    /// How long without a failing window before recovery starts, 0..=86400000 ms.
    #[schema(value_type = i64, required = false, minimum = 0, maximum = 86400000)]
    pub quiet_ms: Option<i64>,
    /// How long the ramp back to the base weight takes, 1..=86400000 ms.
    #[schema(value_type = i64, required = false, minimum = 1, maximum = 86400000)]
    pub slow_start_ms: Option<i64>,
    /// Smoothing of the error and latency averages behind suggested weights, in (0, 1].
    #[schema(value_type = f64, required = false, exclusive_minimum = 0, maximum = 1)]
    pub ewma_alpha: Option<f64>,
}

/// A tiers pool's tier policy: overrides of the defaults; a field left out takes its
/// default. `normal_at_least` must be below `good_at_least` by at least twice `margin`.
/// Describes `engine::adaptive::TierPolicy`.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TierPolicy {
    /// `off` (default), `suggest` (moves are offered on the pool's page for a person to
    /// accept) or `automatic` (moves are applied as found, each an audited change with
    /// source `health`). Not `off`: a tiers pool only.
    #[schema(value_type = String, required = false, pattern = "^(off|suggest|automatic)$")]
    pub mode: Option<String>,
    /// Minutes of outcomes judged at once (epoch-aligned windows), 1..=60; default 5.
    #[schema(value_type = u32, required = false, minimum = 1, maximum = 60)]
    pub window_minutes: Option<u32>,
    /// Fewer outcomes than this in a window: no decision; 1..=2^53−1; default 50.
    #[schema(value_type = u64, required = false, minimum = 1, maximum = 9007199254740991_u64)]
    pub min_volume: Option<u64>,
    /// A rate at or above this points at G, 0..=1; default 0.95.
    #[schema(value_type = f64, required = false, minimum = 0, maximum = 1)]
    pub good_at_least: Option<f64>,
    /// A rate at or above this (and below `good_at_least`) points at N, below it at U,
    /// 0..=1; default 0.8.
    #[schema(value_type = f64, required = false, minimum = 0, maximum = 1)]
    pub normal_at_least: Option<f64>,
    /// How far past a boundary a rate must be to leave the tier it is in, 0..=0.5; default 0.02.
    #[schema(value_type = f64, required = false, minimum = 0, maximum = 0.5)]
    pub margin: Option<f64>,
    /// Consecutive windows pointing one way before a channel moves, 1..=100; default 3.
    #[schema(value_type = u32, required = false, minimum = 1, maximum = 100)]
    pub windows: Option<u32>,
    /// At most one move per channel per this many ms, 0..=604800000; default 1800000.
    #[schema(value_type = i64, required = false, minimum = 0, maximum = 604800000)]
    pub cooldown_ms: Option<i64>,
}

/// A member's daily cap: most draws per local day, 1..=2^53−1.
pub struct Cap;

impl PartialSchema for Cap {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int64)))
            .minimum(Some(1))
            .maximum(Some(9_007_199_254_740_991_u64))
            .description(Some("Most draws per member per local day, 1..=2^53−1"))
            .into()
    }
}

impl ToSchema for Cap {}

/// What a pool's tickets name. Describes `client::pool::PoolKind`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum PoolKind {
    Channels,
    Tiers,
}

/// How a pool orders each batch. Describes `engine::Ordering`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Ordering {
    Shuffle,
    Smooth,
}

/// One daily peak window of a pool, in the pool's timezone: `[start, end)` (crossing midnight
/// when `start` is after `end`). Describes `engine::peak::PeakWindow`.
#[derive(utoipa::ToSchema)]
pub struct PeakWindowEntry {
    /// Local start time, `HH:MM` (or `HH:MM:SS`), inclusive.
    #[schema(example = "19:00", pattern = "^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$")]
    pub start: String,
    /// Local end time, `HH:MM` (or `HH:MM:SS`), exclusive; not equal to `start`.
    #[schema(example = "23:00", pattern = "^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$")]
    pub end: String,
    /// Batch size multiplier during the window, 1..=1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub multiplier: u32,
    /// Weights used instead of the pool's during the window; they name only the pool's own
    /// members (a tiers pool's tiers).
    #[schema(min_items = 1)]
    pub weights: Option<Vec<WeightEntry>>,
}

/// A traffic tier: good, normal, unqualified. Describes `engine::Tier`.
#[derive(utoipa::ToSchema)]
pub enum Tier {
    G,
    N,
    U,
}

/// How a weight change reaches the tickets already in the pool: `drain` lets them be drawn
/// and uses the new weights from the next batch; `immediate` replaces them at once.
/// Describes `client::pool::ReweightMode`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ReweightMode {
    Drain,
    Immediate,
}

/// An operator's override of health evaluation: `healthy` (full weight whatever the
/// outcomes) or `ejected`. Describes `engine::health::Pin`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Pin {
    Healthy,
    Ejected,
}

/// A grant's kind: `temporary` tokens pay after every bonus, soonest expiry first; `bonus`
/// tokens pay first, lower `priority` first.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum GrantKind {
    Temporary,
    Bonus,
}

/// What a person may do: `viewer` reads; `operator` also ejects, restores, pins and
/// rebuilds; `pm` also edits configuration; `auditor` reads and exports the audit trail;
/// `admin` does all of that and manages users and tokens. Describes `access::Role`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Pm,
    Auditor,
    Admin,
}

/// An API token's scope: `dataplane` (draws, quota operations, outcome reports, within its
/// bindings), `admin` (reads, operations and edits of the admin API; not users and tokens)
/// or `metrics` (`/metrics` and `/readyz/details` only). Describes `access::Scope`.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum TokenScope {
    Dataplane,
    Admin,
    Metrics,
}

/// What clients do for a tenant while Redis is unreachable. Describes
/// `client::quota::FallbackPolicy`.
#[derive(utoipa::ToSchema)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum Fallback {
    /// Refuse every reservation (the default: no admission goes uncounted).
    FailClosed,
    /// Admit up to `allowance` tokens per client while Redis is away, and charge them once
    /// it answers again.
    FailOpenLimited {
        /// Tokens, 1..=2^53−1.
        #[schema(minimum = 1, maximum = 9007199254740991_u64)]
        allowance: u64,
    },
}

/// The body of `PUT /api/v1/tenants/{tenant}`: the tenant's plan and settings, and the
/// bookkeeping of the change. Any other field is refused (400 naming it).
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSettings {
    /// The tenant's plan (an existing plan's name: 422 otherwise).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub plan: String,
    /// How long a reservation stays open before the sweeper returns it, 1..=86400000 ms
    /// (default 600000).
    #[schema(value_type = i64, required = false, minimum = 1, maximum = 86400000)]
    pub reservation_ttl_ms: Option<i64>,
    /// Days a period's counters are kept after it ends, 1..=3660 (default 62).
    #[schema(value_type = i64, required = false, minimum = 1, maximum = 3660)]
    pub retention_days: Option<i64>,
    /// How long Redis itself answers a repeated reserve, settle or release of a finished
    /// reservation, 60000..=34560000000 ms (default 3600000, an hour); after it, the usage
    /// ledger answers.
    #[schema(value_type = i64, required = false, minimum = 60000, maximum = 34560000000_i64)]
    pub idempotency_window_ms: Option<i64>,
    /// What clients do while Redis is unreachable: `{"policy": "fail_closed"}` (the
    /// default) or `{"policy": "fail_open_limited", "allowance": <tokens>}`.
    #[schema(value_type = Fallback, required = false)]
    pub fallback: Option<Fallback>,
    /// The tenant's version this change was made against: 0 to create.
    #[schema(minimum = 0)]
    pub expected_version: i64,
    /// Why (at most 500 characters, no control characters), for the audit trail.
    pub reason: Option<Reason>,
}

/// Why a change was made, for the audit trail, where a reason may be left out: at most 500
/// characters, no control characters but tab and newline; blank counts as left out.
pub struct Reason;

/// Why a change was made, for the audit trail, where a reason is required: 1..=500
/// characters, not blank, no control characters but tab and newline.
pub struct RequiredReason;

/// Characters a reason may hold: none of the control characters but tab and newline (the
/// C0 and C1 controls and DEL, as Rust's `char::is_control`).
const REASON_CHAR: &str = r"[^\x00-\x08\x0b-\x1f\x7f-\x9f]";

fn reason_schema(pattern: String, min_length: Option<usize>, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(min_length)
        .max_length(Some(500))
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

impl PartialSchema for Reason {
    fn schema() -> RefOr<Schema> {
        reason_schema(
            format!("^{REASON_CHAR}*$"),
            None,
            "Why, for the audit trail: at most 500 characters, no control characters but tab and newline",
        )
    }
}

impl ToSchema for Reason {}

impl PartialSchema for RequiredReason {
    fn schema() -> RefOr<Schema> {
        // At least one character that is neither white space nor a control character.
        reason_schema(
            format!(r"^{REASON_CHAR}*[^\s\x00-\x1f\x7f-\x9f]{REASON_CHAR}*$"),
            Some(1),
            "Why, for the audit trail (required): 1..=500 characters, not blank, no control characters but tab and newline",
        )
    }
}

impl ToSchema for RequiredReason {}

/// The body of a 409 that is either a version conflict (`ConflictBody`) or a duplicate
/// identity (`ErrorBody` naming the field and the rule).
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum ConflictOrDuplicateBody {
    Conflict(ConflictBody),
    Duplicate(ErrorBody),
}

/// Names a data-plane token is bound to (tenants, pools or routes): `["*"]` alone for
/// any, or distinct names of 1..=64 of `[A-Za-z0-9_-]`; at most 1000.
pub struct BoundNames;

/// Channel codes a data-plane token may report outcomes for: `["*"]` alone, or distinct
/// codes of 1..=64 of `[A-Za-z0-9_.-]`; at most 1000.
pub struct BoundCodes;

fn bound_list(pattern: &str, what: &str) -> RefOr<Schema> {
    use utoipa::openapi::schema::ArrayBuilder;
    ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String).pattern(Some(pattern)))
        .unique_items(true)
        .max_items(Some(1000))
        .description(Some(format!(
            "{what}: [\"*\"] alone for any (also those created later), or distinct names; empty: none"
        )))
        .into()
}

impl PartialSchema for BoundNames {
    fn schema() -> RefOr<Schema> {
        bound_list(r"^(\*|[A-Za-z0-9_-]{1,64})$", "Names")
    }
}

impl ToSchema for BoundNames {}

impl PartialSchema for BoundCodes {
    fn schema() -> RefOr<Schema> {
        bound_list(r"^(\*|[A-Za-z0-9_.-]{1,64})$", "Channel codes")
    }
}

impl ToSchema for BoundCodes {}

/// What a data-plane token serves (`PUT /api/v1/tokens/{id}/bindings`); a list left out
/// is `["*"]`. Describes `api::access::TokenBindings`.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBindingsBody {
    /// Tenants the token may reserve, settle and release for.
    #[serde(default)]
    #[schema(value_type = BoundNames)]
    pub tenants: Vec<String>,
    /// Pools it may draw from.
    #[serde(default)]
    #[schema(value_type = BoundNames)]
    pub pools: Vec<String>,
    /// Routes it may draw through.
    #[serde(default)]
    #[schema(value_type = BoundNames)]
    pub routes: Vec<String>,
    /// Channels it may report outcomes for.
    #[serde(default)]
    #[schema(value_type = BoundCodes)]
    pub channels: Vec<String>,
}

/// A reserve's 429: a quota dimension ran out (`QuotaRefusedBody`), or the server is
/// estimating as many prompts as it may at once (`ErrorBody`, with `Retry-After`).
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
pub enum RefusedOrThrottledBody {
    Refused(QuotaRefusedBody),
    Throttled(ErrorBody),
}

/// A decimal amount in a route's condition or a request's `amount`: a JSON number, or a
/// string such as `"999.99"`, at most 20 digits before the point and 18 after (compared
/// exactly).
pub struct AmountValue;

const AMOUNT_PATTERN: &str = r"^-?[0-9]{1,20}(\.[0-9]{1,18})?$";

impl PartialSchema for AmountValue {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::OneOfBuilder;
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .exclusive_minimum(Some(-1e20))
                    .exclusive_maximum(Some(1e20)),
            )
            .item(ObjectBuilder::new().schema_type(Type::String).pattern(Some(AMOUNT_PATTERN)))
            .description(Some("A decimal amount: a number, or a string such as \"999.99\" (at most 20 digits before the point, 18 after)"))
            .into()
    }
}

impl ToSchema for AmountValue {}

/// Characters of a route's text values: no control characters.
const TEXT_CHAR: &str = r"[^\x00-\x1f\x7f-\x9f]";

fn text_value() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(256))
        .pattern(Some(format!("^{TEXT_CHAR}+$")))
}

/// An attribute's value in a request or a condition: a string (1..=256 characters, no
/// control characters) or a number (compared as its decimal text).
pub struct AttributeValue;

impl PartialSchema for AttributeValue {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::OneOfBuilder;
        OneOfBuilder::new()
            .item(text_value())
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .exclusive_minimum(Some(-1e20))
                    .exclusive_maximum(Some(1e20)),
            )
            .description(Some("A string (1..=256 characters, no control characters) or a number"))
            .into()
    }
}

impl ToSchema for AttributeValue {}

/// What a rule asks of one attribute: a range of amounts (`gte` or `gt`, `lte` or `lt`, at
/// least one; the range must hold an amount), or exactly one of `equals`, `in`, `prefix`.
/// `amount` takes only a range; `currency` values are three letters and `country` values
/// two (either case). Rules across fields are refused with a 422 naming the field.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteCondition {
    /// At least this amount.
    #[schema(value_type = Option<AmountValue>)]
    pub gte: Option<AmountValue>,
    /// More than this amount.
    #[schema(value_type = Option<AmountValue>)]
    pub gt: Option<AmountValue>,
    /// At most this amount.
    #[schema(value_type = Option<AmountValue>)]
    pub lte: Option<AmountValue>,
    /// Less than this amount.
    #[schema(value_type = Option<AmountValue>)]
    pub lt: Option<AmountValue>,
    /// Exactly this value.
    #[schema(value_type = Option<AttributeValue>)]
    pub equals: Option<AttributeValue>,
    /// One of these values (1..=1000).
    #[schema(value_type = Option<Vec<AttributeValue>>, min_items = 1, max_items = 1000)]
    #[serde(rename = "in")]
    pub in_: Option<Vec<AttributeValue>>,
    /// Starts with this text (1..=256 characters, no control characters).
    #[schema(min_length = 1, max_length = 256, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]+$")]
    pub prefix: Option<String>,
}

/// One rule of a route: when every condition holds (`when`, by attribute name: a
/// lower-case letter then up to 63 of `[a-z0-9_]`; at most 32), the request draws from
/// `pool`. A rule without conditions matches every request, so no rule may follow it.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRule {
    /// The rule's name (unique in the route; default `rule-<position>`), as draws name it.
    #[schema(pattern = "^[A-Za-z0-9_.-]{1,64}$")]
    pub name: Option<String>,
    /// The conditions, by attribute.
    #[schema(value_type = RouteConditions)]
    pub when: BTreeMap<String, RouteCondition>,
    /// The pool (it must exist).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub pool: String,
}

/// A rule's conditions, by attribute name (a lower-case letter then up to 63 of
/// `[a-z0-9_]`; at most 32).
pub struct RouteConditions;

impl PartialSchema for RouteConditions {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(utoipa::openapi::Ref::from_schema_name(RouteCondition::name())))
            .property_names(Some(attribute_name()))
            .max_properties(Some(32))
            .description(Some("The conditions, by attribute name (a lower-case letter then up to 63 of [a-z0-9_])"))
            .into()
    }
}

impl ToSchema for RouteConditions {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((RouteCondition::name().into(), RouteCondition::schema()));
        <RouteCondition as ToSchema>::schemas(schemas);
    }
}

fn attribute_name() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[a-z][a-z0-9_]{0,63}$"))
}

/// A request's attributes, by name (a lower-case letter then up to 63 of `[a-z0-9_]`; at
/// most 32): `amount` a decimal amount, `currency` three letters, `country` two letters,
/// any other a string or a number.
pub struct RouteAttributes;

impl PartialSchema for RouteAttributes {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("amount", AmountValue::schema())
            .property("currency", ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[A-Za-z]{3}$")))
            .property("country", ObjectBuilder::new().schema_type(Type::String).pattern(Some("^[A-Za-z]{2}$")))
            .additional_properties(Some(AttributeValue::schema()))
            .property_names(Some(attribute_name()))
            .max_properties(Some(32))
            .description(Some(
                "The request's attributes by name (a lower-case letter then up to 63 of [a-z0-9_]): amount, currency \
                 (three letters), country (two letters), method, merchant, any other: a string or a number",
            ))
            .into()
    }
}

impl ToSchema for RouteAttributes {}

/// A pool's short-window caps: most draws per member in each window of `minutes`
/// (1..=1440; windows aligned to the epoch), besides the daily caps; members must be the
/// pool's (422 otherwise).
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowCapsEntry {
    /// The window's length in minutes.
    #[schema(minimum = 1, maximum = 1440)]
    pub minutes: u32,
    /// Most draws per member in one window, 1..=2^53−1, by member (at least one).
    #[schema(value_type = BTreeMap<String, Cap>)]
    pub caps: BTreeMap<String, u64>,
}
