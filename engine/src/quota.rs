//! Which quota buckets pay for a reservation, and how an overdraft is charged.
//!
//! Order (design.md §4): bonus buckets first, by priority (lower number first) then soonest
//! expiry (no expiry last); then temporary grants by soonest expiry; then the plan bucket.
//! Remaining ties go by bucket id, so the order is total and the Lua side can mirror it.
//! A bucket whose expiry is at or before `now` pays nothing, and so does a bucket with
//! nothing left (a plan bucket may be negative after an overdraft).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest amount handled, `2^53 − 1`: the Lua scripts hold amounts as doubles.
pub const MAX_AMOUNT: u64 = (1 << 53) - 1;

/// Why a charge was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuotaError {
    #[error("cost {cost} exceeds the largest amount handled, {MAX_AMOUNT} (2^53 − 1)")]
    AmountTooLarge { cost: u64 },
    #[error("insufficient quota: cost {cost}, available {available}")]
    Insufficient { cost: u64, available: u64 },
    #[error("an overdraft of {overdraft} must be charged to a plan bucket, but there is none")]
    NoPlanBucket { overdraft: u64 },
}

/// What kind of grant a bucket holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BucketKind {
    /// The period's allowance; pays last; may go negative through an overdraft.
    Plan,
    /// A temporary grant; pays before the plan, soonest expiry first.
    Temporary,
    /// A bonus grant; pays first, lower `priority` number first.
    Bonus { priority: u32 },
}

/// One bucket of quota as read from the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub id: String,
    #[serde(flatten)]
    pub kind: BucketKind,
    /// Amount left; negative only for a plan bucket after an overdraft.
    pub left: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

impl Bucket {
    /// What the bucket can pay at `now`: 0 when expired or empty.
    pub fn payable(&self, now: DateTime<Utc>) -> u64 {
        match self.expires_at {
            Some(at) if at <= now => 0,
            _ => self.left.max(0) as u64,
        }
    }
}

/// An amount taken from one bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub bucket: String,
    pub amount: u64,
}

/// The outcome of charging actual use that may exceed what is available.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// Payments in paying order; the plan bucket's payment includes the overdraft.
    pub payments: Vec<Payment>,
    /// The part of the charge beyond what was available (0 when it all fitted).
    pub overdraft: u64,
}

fn rank(kind: BucketKind) -> (u8, u32) {
    match kind {
        BucketKind::Bonus { priority } => (0, priority),
        BucketKind::Temporary => (1, 0),
        BucketKind::Plan => (2, 0),
    }
}

/// Indices of `buckets` in paying order (expired and empty ones included, in place).
pub fn payment_order(buckets: &[Bucket]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..buckets.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&buckets[a], &buckets[b]);
        rank(x.kind)
            .cmp(&rank(y.kind))
            // Soonest expiry first; no expiry after every dated one.
            .then_with(|| match (x.expires_at, y.expires_at) {
                (Some(p), Some(q)) => p.cmp(&q),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| x.id.cmp(&y.id))
    });
    order
}

/// Total payable at `now`.
pub fn available(buckets: &[Bucket], now: DateTime<Utc>) -> u64 {
    buckets.iter().map(|b| b.payable(now)).sum()
}

/// What a new reservation may take at `now`: [`available`] less any plan overdraft, so a
/// tenant in debt is refused until its grants outweigh the debt (the Lua `reserve` rule).
pub fn net_available(buckets: &[Bucket], now: DateTime<Utc>) -> u64 {
    let debt: u64 =
        buckets.iter().filter(|b| b.kind == BucketKind::Plan && b.left < 0).map(|b| b.left.unsigned_abs()).sum();
    available(buckets, now).saturating_sub(debt)
}

/// The buckets that pay a new reservation of `cost`: refused unless [`net_available`]
/// covers it, then paid as by [`plan_payment`].
pub fn reserve_payment(buckets: &[Bucket], cost: u64, now: DateTime<Utc>) -> Result<Vec<Payment>, QuotaError> {
    let net = net_available(buckets, now);
    if cost <= MAX_AMOUNT && net < cost {
        return Err(QuotaError::Insufficient { cost, available: net });
    }
    plan_payment(buckets, cost, now)
}

/// Which buckets pay `cost`, and how much each: amounts sum to `cost` exactly, or the
/// charge is refused saying how much is available. A cost of 0 pays nothing.
pub fn plan_payment(buckets: &[Bucket], cost: u64, now: DateTime<Utc>) -> Result<Vec<Payment>, QuotaError> {
    if cost > MAX_AMOUNT {
        return Err(QuotaError::AmountTooLarge { cost });
    }
    let total = available(buckets, now);
    if total < cost {
        return Err(QuotaError::Insufficient { cost, available: total });
    }
    let mut due = cost;
    let mut payments = Vec::new();
    for i in payment_order(buckets) {
        if due == 0 {
            break;
        }
        let amount = buckets[i].payable(now).min(due);
        if amount > 0 {
            payments.push(Payment { bucket: buckets[i].id.clone(), amount });
            due -= amount;
        }
    }
    Ok(payments)
}

/// Charges actual use, which may exceed what is available (LLM usage is known only after
/// the call): buckets pay in order as far as they can, and the remainder is added to the
/// plan bucket's payment, taking it below zero; the next reservation is then refused
/// until the plan refills. With several plan buckets the first in paying order takes it.
pub fn charge_overdraft(buckets: &[Bucket], actual: u64, now: DateTime<Utc>) -> Result<Charge, QuotaError> {
    if actual > MAX_AMOUNT {
        return Err(QuotaError::AmountTooLarge { cost: actual });
    }
    let payable = available(buckets, now).min(actual);
    let mut payments = plan_payment(buckets, payable, now)?;
    let overdraft = actual - payable;
    if overdraft > 0 {
        let plan = payment_order(buckets)
            .into_iter()
            .find(|&i| buckets[i].kind == BucketKind::Plan)
            .ok_or(QuotaError::NoPlanBucket { overdraft })?;
        let id = &buckets[plan].id;
        match payments.iter_mut().find(|p| &p.bucket == id) {
            Some(p) => p.amount += overdraft,
            None => payments.push(Payment { bucket: id.clone(), amount: overdraft }),
        }
    }
    Ok(Charge { payments, overdraft })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> DateTime<Utc> {
        "2026-11-15T12:00:00Z".parse().unwrap()
    }

    fn at(day: u32) -> Option<DateTime<Utc>> {
        Some(format!("2026-11-{day:02}T00:00:00Z").parse().unwrap())
    }

    fn bucket(id: &str, kind: BucketKind, left: i64, expires_at: Option<DateTime<Utc>>) -> Bucket {
        Bucket { id: id.into(), kind, left, expires_at }
    }

    fn ids(payments: &[Payment]) -> Vec<(&str, u64)> {
        payments.iter().map(|p| (p.bucket.as_str(), p.amount)).collect()
    }

    fn sample() -> Vec<Bucket> {
        vec![
            bucket("plan", BucketKind::Plan, 1000, None),
            bucket("temp-late", BucketKind::Temporary, 50, at(30)),
            bucket("temp-soon", BucketKind::Temporary, 50, at(20)),
            bucket("bonus-p2", BucketKind::Bonus { priority: 2 }, 10, at(16)),
            bucket("bonus-p1-late", BucketKind::Bonus { priority: 1 }, 10, None),
            bucket("bonus-p1-soon", BucketKind::Bonus { priority: 1 }, 10, at(25)),
            bucket("bonus-expired", BucketKind::Bonus { priority: 0 }, 99, at(15)),
        ]
    }

    #[test]
    fn bonus_pays_first_by_priority_then_expiry_then_temporary_then_plan() {
        let paid = plan_payment(&sample(), 200, now()).unwrap();
        assert_eq!(
            ids(&paid),
            vec![
                ("bonus-p1-soon", 10),
                ("bonus-p1-late", 10),
                ("bonus-p2", 10),
                ("temp-soon", 50),
                ("temp-late", 50),
                ("plan", 70),
            ]
        );
    }

    #[test]
    fn an_expired_bucket_pays_nothing_even_when_first_in_order() {
        let paid = plan_payment(&sample(), 5, now()).unwrap();
        assert_eq!(ids(&paid), vec![("bonus-p1-soon", 5)]);
    }

    #[test]
    fn a_cost_beyond_what_is_available_is_refused_saying_how_much_is() {
        let err = plan_payment(&sample(), 2000, now()).unwrap_err();
        assert_eq!(err, QuotaError::Insufficient { cost: 2000, available: 1130 });
        assert_eq!(err.to_string(), "insufficient quota: cost 2000, available 1130");
    }

    #[test]
    fn an_overdraft_is_charged_to_the_plan_bucket() {
        let charge = charge_overdraft(&sample(), 1200, now()).unwrap();
        assert_eq!(charge.overdraft, 70);
        assert_eq!(charge.payments.last().unwrap(), &Payment { bucket: "plan".into(), amount: 1070 });
        assert_eq!(charge.payments.iter().map(|p| p.amount).sum::<u64>(), 1200);
        let no_plan: Vec<Bucket> = sample().into_iter().filter(|b| b.kind != BucketKind::Plan).collect();
        assert_eq!(charge_overdraft(&no_plan, 1000, now()).unwrap_err(), QuotaError::NoPlanBucket { overdraft: 870 });
    }

    #[test]
    fn a_negative_plan_pays_nothing_and_an_oversized_amount_is_refused() {
        let b = vec![bucket("plan", BucketKind::Plan, -40, None)];
        assert_eq!(plan_payment(&b, 1, now()).unwrap_err(), QuotaError::Insufficient { cost: 1, available: 0 });
        assert!(matches!(plan_payment(&b, 1 << 53, now()), Err(QuotaError::AmountTooLarge { .. })));
    }

    #[test]
    fn a_reservation_is_refused_while_the_plan_debt_outweighs_the_grants() {
        let b = vec![
            bucket("plan", BucketKind::Plan, -40, None),
            bucket("b1", BucketKind::Bonus { priority: 1 }, 100, None),
        ];
        assert_eq!(net_available(&b, now()), 60);
        assert_eq!(reserve_payment(&b, 61, now()).unwrap_err(), QuotaError::Insufficient { cost: 61, available: 60 });
        assert_eq!(ids(&reserve_payment(&b, 60, now()).unwrap()), vec![("b1", 60)]);
    }

    #[test]
    fn buckets_serialise_with_a_kind_tag() {
        let b = bucket("b1", BucketKind::Bonus { priority: 3 }, 5, None);
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, r#"{"id":"b1","kind":"bonus","priority":3,"left":5,"expires_at":null}"#);
        assert_eq!(serde_json::from_str::<Bucket>(&json).unwrap(), b);
    }

    fn buckets_strategy() -> impl Strategy<Value = Vec<Bucket>> {
        let kind = prop_oneof![
            Just(BucketKind::Plan),
            Just(BucketKind::Temporary),
            (0u32..4).prop_map(|priority| BucketKind::Bonus { priority }),
        ];
        prop::collection::vec((kind, -50i64..500, prop::option::of(1u32..30)), 0..8).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (kind, left, day))| bucket(&format!("b{i}"), kind, left, day.and_then(at)))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn payments_sum_to_the_cost_or_the_refusal_states_the_true_availability(
            buckets in buckets_strategy(), cost in 0u64..3000,
        ) {
            let payable = available(&buckets, now());
            match plan_payment(&buckets, cost, now()) {
                Ok(paid) => {
                    prop_assert_eq!(paid.iter().map(|p| p.amount).sum::<u64>(), cost);
                    for p in &paid {
                        let b = buckets.iter().find(|b| b.id == p.bucket).unwrap();
                        prop_assert!(p.amount > 0 && p.amount <= b.payable(now()));
                    }
                }
                Err(e) => prop_assert_eq!(e, QuotaError::Insufficient { cost, available: payable }),
            }
        }

        #[test]
        fn a_bucket_pays_only_once_every_earlier_bucket_is_exhausted(
            buckets in buckets_strategy(), cost in 1u64..3000,
        ) {
            if let Ok(paid) = plan_payment(&buckets, cost, now()) {
                let order = payment_order(&buckets);
                let position = |id: &str| order.iter().position(|&i| buckets[i].id == id).unwrap();
                // All but the last payment empty their bucket, and payments follow the order.
                for pair in paid.windows(2) {
                    prop_assert!(position(&pair[0].bucket) < position(&pair[1].bucket));
                }
                for p in &paid[..paid.len().saturating_sub(1)] {
                    let b = buckets.iter().find(|b| b.id == p.bucket).unwrap();
                    prop_assert_eq!(p.amount, b.payable(now()));
                }
                // No skipped bucket had anything to pay.
                let last = position(&paid.last().unwrap().bucket);
                for &i in &order[..last] {
                    if !paid.iter().any(|p| p.bucket == buckets[i].id) {
                        prop_assert_eq!(buckets[i].payable(now()), 0);
                    }
                }
            }
        }

        #[test]
        fn an_overdraft_charge_always_charges_the_whole_actual_use(
            buckets in buckets_strategy(), actual in 0u64..3000,
        ) {
            let has_plan = buckets.iter().any(|b| b.kind == BucketKind::Plan);
            match charge_overdraft(&buckets, actual, now()) {
                Ok(c) => {
                    prop_assert_eq!(c.payments.iter().map(|p| p.amount).sum::<u64>(), actual);
                    prop_assert_eq!(c.overdraft, actual.saturating_sub(available(&buckets, now())));
                }
                Err(e) => {
                    prop_assert!(!has_plan);
                    let is_no_plan = matches!(e, QuotaError::NoPlanBucket { .. });
                    prop_assert!(is_no_plan);
                }
            }
        }
    }
}
