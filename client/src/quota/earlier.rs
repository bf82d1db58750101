//! A finished reservation as the usage ledger holds it, and the replies it gives a
//! repeated reserve, settle or release once Redis no longer holds the request's done
//! marker (the tenant's idempotency window passed).

use super::{Expired, Part, ReleaseOutcome, Reservation, ReservationState, SettleOutcome, Source, UsageOutcome};

/// How a request id's latest reservation ended, from its ledger rows: its settle if it has
/// one (also one after an expiry), else its release or expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Earlier {
    pub outcome: UsageOutcome,
    /// The tokens the reservation held.
    pub reserved: u64,
    /// A settle's tokens used and what each bucket paid (0 and empty otherwise).
    pub actual: u64,
    pub charged: Vec<Part>,
    /// The reservation's parts and deadline; `None` for rows from before they were kept.
    pub reserved_parts: Option<Vec<Part>>,
    pub deadline_ms: Option<i64>,
    /// When the reservation was made (ms since the epoch).
    pub reserved_at_ms: i64,
}

impl Earlier {
    /// The reply to a repeated reserve: the first reservation, replayed, as it ended.
    /// A row from before parts were kept answers with no parts and its reservation time as
    /// the deadline.
    pub fn reserve_reply(&self) -> Reservation {
        Reservation {
            tokens: self.reserved,
            deadline_ms: self.deadline_ms.unwrap_or(self.reserved_at_ms),
            parts: self.reserved_parts.clone().unwrap_or_default(),
            replayed: true,
            state: match self.outcome {
                UsageOutcome::Settled => ReservationState::Settled,
                UsageOutcome::Released => ReservationState::Released,
                UsageOutcome::Expired => ReservationState::Expired,
            },
            source: Source::Ledger,
        }
    }

    /// The reply to a repeated settle, or the expiry to charge late (a settle after the
    /// sweep is charged, whenever it comes).
    pub fn settle_reply(&self) -> Result<SettleOutcome, Expired> {
        match self.outcome {
            UsageOutcome::Settled => Ok(SettleOutcome::AlreadySettled {
                reserved: self.reserved,
                actual: self.actual,
                charged: self.charged.clone(),
            }),
            UsageOutcome::Released => Ok(SettleOutcome::AlreadyReleased { reserved: self.reserved }),
            UsageOutcome::Expired => Err(Expired {
                tokens: self.reserved,
                deadline_ms: self.deadline_ms.unwrap_or(self.reserved_at_ms),
                parts: self.reserved_parts.clone().unwrap_or_default(),
            }),
        }
    }

    /// The reply to a repeated release (an expiry was released by the sweeper).
    pub fn release_reply(&self) -> ReleaseOutcome {
        match self.outcome {
            UsageOutcome::Settled => ReleaseOutcome::AlreadySettled {
                reserved: self.reserved,
                actual: self.actual,
                charged: self.charged.clone(),
            },
            UsageOutcome::Released | UsageOutcome::Expired => {
                ReleaseOutcome::AlreadyReleased { reserved: self.reserved }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(outcome: UsageOutcome, parts: Option<Vec<Part>>, deadline_ms: Option<i64>) -> Earlier {
        Earlier {
            outcome,
            reserved: 40,
            actual: if outcome == UsageOutcome::Settled { 25 } else { 0 },
            charged: if outcome == UsageOutcome::Settled {
                vec![Part { bucket: "plan".into(), tokens: 25 }]
            } else {
                vec![]
            },
            reserved_parts: parts,
            deadline_ms,
            reserved_at_ms: 1_000,
        }
    }

    #[test]
    fn each_outcome_answers_a_repeat_as_redis_did_within_the_window() {
        let parts = vec![Part { bucket: "gift".into(), tokens: 10 }, Part { bucket: "plan".into(), tokens: 30 }];
        let settled = row(UsageOutcome::Settled, Some(parts.clone()), Some(61_000));
        let reservation = settled.reserve_reply();
        assert_eq!(
            (reservation.tokens, reservation.deadline_ms, &reservation.parts, reservation.replayed, reservation.state),
            (40, 61_000, &parts, true, ReservationState::Settled)
        );
        assert_eq!(reservation.source, Source::Ledger);
        let charged = vec![Part { bucket: "plan".into(), tokens: 25 }];
        assert_eq!(
            settled.settle_reply(),
            Ok(SettleOutcome::AlreadySettled { reserved: 40, actual: 25, charged: charged.clone() })
        );
        assert_eq!(settled.release_reply(), ReleaseOutcome::AlreadySettled { reserved: 40, actual: 25, charged });

        let released = row(UsageOutcome::Released, Some(parts.clone()), Some(61_000));
        assert_eq!(released.reserve_reply().state, ReservationState::Released);
        assert_eq!(released.settle_reply(), Ok(SettleOutcome::AlreadyReleased { reserved: 40 }));
        assert_eq!(released.release_reply(), ReleaseOutcome::AlreadyReleased { reserved: 40 });

        let expired = row(UsageOutcome::Expired, Some(parts.clone()), Some(61_000));
        assert_eq!(expired.reserve_reply().state, ReservationState::Expired);
        assert_eq!(expired.settle_reply(), Err(Expired { tokens: 40, deadline_ms: 61_000, parts }));
        assert_eq!(expired.release_reply(), ReleaseOutcome::AlreadyReleased { reserved: 40 });
    }

    #[test]
    fn a_row_from_before_parts_were_kept_answers_without_them() {
        let old = row(UsageOutcome::Released, None, None);
        let reservation = old.reserve_reply();
        assert_eq!((reservation.deadline_ms, reservation.parts.len()), (1_000, 0));
    }
}
