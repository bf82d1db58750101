//! What a client admitted, settled or released while Redis was unreachable, kept in order
//! until it is charged to Redis. Replaying is safe to repeat: every script is idempotent
//! per request id, so an entry leaves the journal only after its replay succeeded. With a
//! journal file ([`super::journal`]) every change is also appended to it, and the file is
//! read back at start.

use serde::Serialize;

use super::journal::{Acks, Entry, JournalFile};
use super::{Dimension, Refusal, ReleaseOutcome, Reservation, ReservationState, ReserveOutcome, SettleOutcome, Source};
use super::{RequestId, TenantId, TokenCount, Tokens};

/// The most operations one tenant may have waiting for Redis in one process: beyond it,
/// the tenant's operations are refused until Redis answers, so a flood cannot fill the
/// memory (nor the journal file).
pub const MAX_WAITING_PER_TENANT: usize = 10_000;

/// The tenant has [`MAX_WAITING_PER_TENANT`] operations waiting already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Full;

/// A change whose journal line did not reach the disk, to take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// An admission made here.
    Admission,
    /// The close (settle or release) of an admission made here.
    Close,
    /// A settle or release queued for a reservation Redis holds.
    Queued,
}

/// How an admission made without Redis was closed, also without Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Close {
    Settle { actual: TokenCount, partial: bool },
    Release,
}

/// One operation waiting for Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Op {
    /// Admitted here; replayed as a forced reservation, then closed as recorded.
    Admit { request: RequestId, tokens: Tokens, close: Option<Close> },
    /// A settle of a reservation Redis holds.
    Settle { request: RequestId, actual: TokenCount, partial: bool },
    /// A release of a reservation Redis holds.
    Release { request: RequestId },
}

impl Op {
    pub(super) fn request(&self) -> &RequestId {
        match self {
            Self::Admit { request, .. } | Self::Settle { request, .. } | Self::Release { request } => request,
        }
    }
}

/// What is waiting, for logs, metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OfflineSummary {
    pub operations: usize,
    /// Tokens admitted without Redis and not yet charged to it.
    pub admitted_tokens: u64,
}

#[derive(Default)]
pub(super) struct Offline {
    ops: Vec<(TenantId, Op)>,
    file: Option<JournalFile>,
    /// Lines appended and not yet known to be on disk, for the caller to wait for.
    acks: Acks,
}

impl Offline {
    /// Attaches a journal file and applies the entries it held (a restart while Redis was
    /// away) after what this journal holds already.
    pub(super) fn attach(&mut self, file: JournalFile, entries: Vec<Entry>) {
        for entry in entries {
            self.apply(entry);
        }
        self.file = Some(file);
    }

    /// The journal file's path, when there is one.
    pub(super) fn path(&self) -> Option<std::path::PathBuf> {
        self.file.as_ref().map(|f| f.path().to_owned())
    }

    /// Drops the journal file (its writer writes what was queued, then lets the file go).
    pub(super) fn detach(&mut self) {
        self.file = None;
    }

    fn apply(&mut self, entry: Entry) {
        let parsed =
            |tenant: &str, request: &str| Some((TenantId::parse(tenant).ok()?, RequestId::parse(request).ok()?));
        match entry {
            Entry::Admit { tenant, request, tokens } => {
                if let (Some((t, r)), Ok(tokens)) = (parsed(&tenant, &request), Tokens::parse("tokens", tokens as i128))
                {
                    if self.find(&t, &r).is_none() {
                        self.ops.push((t, Op::Admit { request: r, tokens, close: None }));
                    }
                }
            }
            Entry::Close { tenant, request, actual, partial } => {
                if let Some((t, r)) = parsed(&tenant, &request) {
                    let close = match actual.map(|a| TokenCount::parse("actual_tokens", a as i128)) {
                        None => Some(Close::Release),
                        Some(Ok(actual)) => Some(Close::Settle { actual, partial }),
                        Some(Err(_)) => None,
                    };
                    if let (Some(Op::Admit { close: slot, .. }), Some(close)) = (self.find(&t, &r), close) {
                        *slot = Some(close);
                    }
                }
            }
            Entry::Settle { tenant, request, actual, partial } => {
                if let (Some((t, r)), Ok(actual)) =
                    (parsed(&tenant, &request), TokenCount::parse("actual_tokens", actual as i128))
                {
                    if self.find(&t, &r).is_none() {
                        self.ops.push((t, Op::Settle { request: r, actual, partial }));
                    }
                }
            }
            Entry::Release { tenant, request } => {
                if let Some((t, r)) = parsed(&tenant, &request) {
                    if self.find(&t, &r).is_none() {
                        self.ops.push((t, Op::Release { request: r }));
                    }
                }
            }
            Entry::Done { tenant, request } => {
                self.ops.retain(|(t, op)| !(t.as_str() == tenant && op.request().as_str() == request));
            }
        }
    }

    fn log(&mut self, entry: Entry) {
        if let Some(file) = &self.file {
            file.append(&entry, &mut self.acks);
        }
    }

    /// The lines appended since the last call, to wait for (after the lock is released).
    pub(super) fn take_acks(&mut self) -> Acks {
        std::mem::take(&mut self.acks)
    }

    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(super) fn summary(&self) -> OfflineSummary {
        let admitted_tokens = self
            .ops
            .iter()
            .map(|(_, op)| match op {
                Op::Admit { tokens, .. } => tokens.get(),
                _ => 0,
            })
            .sum();
        OfflineSummary { operations: self.ops.len(), admitted_tokens }
    }

    fn has_room(&self, tenant: &TenantId) -> Result<(), Full> {
        let waiting = self.ops.iter().filter(|(t, _)| t == tenant).count();
        if waiting < MAX_WAITING_PER_TENANT {
            Ok(())
        } else {
            Err(Full)
        }
    }

    /// Takes back a change whose journal line could not be written: its caller is
    /// answered with a failure, so nothing stays here that a restart would not know.
    pub(super) fn take_back(&mut self, tenant: &TenantId, request: &RequestId, change: Change) {
        let at = |t: &TenantId, op: &Op| t == tenant && op.request() == request;
        match change {
            Change::Admission => self.ops.retain(|(t, op)| !(at(t, op) && matches!(op, Op::Admit { .. }))),
            Change::Close => {
                if let Some(Op::Admit { close, .. }) = self.find(tenant, request) {
                    *close = None;
                }
            }
            Change::Queued => {
                self.ops.retain(|(t, op)| !(at(t, op) && matches!(op, Op::Settle { .. } | Op::Release { .. })))
            }
        }
    }

    fn find(&mut self, tenant: &TenantId, request: &RequestId) -> Option<&mut Op> {
        self.ops.iter_mut().find(|(t, op)| t == tenant && op.request() == request).map(|(_, op)| op)
    }

    /// Admits `tokens` if the tenant's admissions since Redis went away stay within
    /// `allowance`; a retried request id gets its first answer. `Full` when the tenant has
    /// as many operations waiting as it may.
    pub(super) fn admit(
        &mut self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        allowance: u64,
    ) -> Result<ReserveOutcome, Full> {
        if let Some(Op::Admit { tokens, close, .. }) = self.find(tenant, request) {
            let state = match close {
                None => ReservationState::Open,
                Some(Close::Settle { .. }) => ReservationState::Settled,
                Some(Close::Release) => ReservationState::Released,
            };
            return Ok(ReserveOutcome::Reserved(fallback_reservation(*tokens, true, state)));
        }
        self.has_room(tenant)?;
        let admitted: u64 = self
            .ops
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, op)| match op {
                Op::Admit { tokens, .. } => tokens.get(),
                _ => 0,
            })
            .sum();
        if admitted + tokens.get() > allowance {
            return Ok(ReserveOutcome::Refused(Refusal {
                dimension: Dimension::FallbackAllowance,
                available: allowance.saturating_sub(admitted),
                limit: allowance,
            }));
        }
        self.ops.push((tenant.clone(), Op::Admit { request: request.clone(), tokens, close: None }));
        self.log(Entry::Admit { tenant: tenant.to_string(), request: request.to_string(), tokens: tokens.get() });
        Ok(ReserveOutcome::Reserved(fallback_reservation(tokens, false, ReservationState::Open)))
    }

    /// Whether this request id was admitted here and is not yet charged to Redis (its
    /// settle or release must then go to the journal, not to Redis).
    pub(super) fn holds_admission(&self, tenant: &TenantId, request: &RequestId) -> bool {
        self.ops.iter().any(|(t, op)| t == tenant && matches!(op, Op::Admit { request: r, .. } if r == request))
    }

    pub(super) fn settle(
        &mut self,
        tenant: &TenantId,
        request: &RequestId,
        actual: TokenCount,
        partial: bool,
    ) -> Result<SettleOutcome, Full> {
        let entry = Entry::Close {
            tenant: tenant.to_string(),
            request: request.to_string(),
            actual: Some(actual.get()),
            partial,
        };
        Ok(match self.find(tenant, request) {
            Some(Op::Admit { tokens, close, .. }) => match close {
                None => {
                    *close = Some(Close::Settle { actual, partial });
                    let reserved = tokens.get();
                    self.log(entry);
                    SettleOutcome::Settled {
                        reserved,
                        actual: actual.get(),
                        overdraft: actual.get().saturating_sub(reserved),
                        charged: Vec::new(),
                        late: false,
                        source: Source::Fallback,
                    }
                }
                Some(Close::Settle { actual, .. }) => {
                    SettleOutcome::AlreadySettled { reserved: tokens.get(), actual: actual.get(), charged: Vec::new() }
                }
                Some(Close::Release) => SettleOutcome::AlreadyReleased { reserved: tokens.get() },
            },
            Some(_) => SettleOutcome::Queued,
            None => {
                self.has_room(tenant)?;
                self.ops.push((tenant.clone(), Op::Settle { request: request.clone(), actual, partial }));
                self.log(Entry::Settle {
                    tenant: tenant.to_string(),
                    request: request.to_string(),
                    actual: actual.get(),
                    partial,
                });
                SettleOutcome::Queued
            }
        })
    }

    pub(super) fn release(&mut self, tenant: &TenantId, request: &RequestId) -> Result<ReleaseOutcome, Full> {
        Ok(match self.find(tenant, request) {
            Some(Op::Admit { tokens, close, .. }) => match close {
                None => {
                    *close = Some(Close::Release);
                    let reserved = tokens.get();
                    self.log(Entry::Close {
                        tenant: tenant.to_string(),
                        request: request.to_string(),
                        actual: None,
                        partial: false,
                    });
                    ReleaseOutcome::Released { reserved, source: Source::Fallback }
                }
                Some(Close::Settle { actual, .. }) => {
                    ReleaseOutcome::AlreadySettled { reserved: tokens.get(), actual: actual.get(), charged: Vec::new() }
                }
                Some(Close::Release) => ReleaseOutcome::AlreadyReleased { reserved: tokens.get() },
            },
            Some(_) => ReleaseOutcome::Queued,
            None => {
                self.has_room(tenant)?;
                self.ops.push((tenant.clone(), Op::Release { request: request.clone() }));
                self.log(Entry::Release { tenant: tenant.to_string(), request: request.to_string() });
                ReleaseOutcome::Queued
            }
        })
    }

    /// A copy of the journal, in the order the operations happened.
    pub(super) fn snapshot(&self) -> Vec<(TenantId, Op)> {
        self.ops.clone()
    }

    /// Drops an operation once replayed (unless it changed meanwhile: then it stays and
    /// is replayed again, which is harmless).
    pub(super) fn remove(&mut self, tenant: &TenantId, op: &Op) {
        if let Some(i) = self.ops.iter().position(|(t, o)| t == tenant && o == op) {
            self.ops.remove(i);
            self.log(Entry::Done { tenant: tenant.to_string(), request: op.request().to_string() });
            if self.ops.is_empty() {
                if let Some(file) = &self.file {
                    file.truncate();
                }
            }
        }
    }
}

fn fallback_reservation(tokens: Tokens, replayed: bool, state: ReservationState) -> Reservation {
    Reservation { tokens: tokens.get(), deadline_ms: 0, parts: Vec::new(), replayed, state, source: Source::Fallback }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }
    fn r(s: &str) -> RequestId {
        RequestId::parse(s).unwrap()
    }
    fn tok(n: i128) -> Tokens {
        Tokens::parse("tokens", n).unwrap()
    }

    #[test]
    fn admissions_stop_at_the_allowance_and_a_retry_is_answered_from_the_journal() {
        let mut j = Offline::default();
        assert!(matches!(j.admit(&t("a"), &r("1"), tok(60), 100), Ok(ReserveOutcome::Reserved(_))));
        let Ok(ReserveOutcome::Refused(refusal)) = j.admit(&t("a"), &r("2"), tok(50), 100) else { panic!() };
        assert_eq!((refusal.dimension, refusal.available), (Dimension::FallbackAllowance, 40));
        let Ok(ReserveOutcome::Reserved(again)) = j.admit(&t("a"), &r("1"), tok(60), 100) else { panic!() };
        assert!(again.replayed);
        // Another tenant has its own allowance.
        assert!(matches!(j.admit(&t("b"), &r("2"), tok(50), 100), Ok(ReserveOutcome::Reserved(_))));
        assert_eq!(j.summary(), OfflineSummary { operations: 2, admitted_tokens: 110 });
    }

    #[test]
    fn a_settle_of_an_offline_admission_closes_it_once() {
        let mut j = Offline::default();
        j.admit(&t("a"), &r("1"), tok(60), 100).unwrap();
        let actual = TokenCount::parse("actual_tokens", 20).unwrap();
        assert!(matches!(j.settle(&t("a"), &r("1"), actual, false), Ok(SettleOutcome::Settled { .. })));
        assert!(matches!(j.settle(&t("a"), &r("1"), actual, false), Ok(SettleOutcome::AlreadySettled { .. })));
        assert!(matches!(j.release(&t("a"), &r("1")), Ok(ReleaseOutcome::AlreadySettled { .. })));
        assert_eq!(j.len(), 1);
        // A settle for a reservation Redis holds is queued once.
        assert_eq!(j.settle(&t("a"), &r("9"), actual, false), Ok(SettleOutcome::Queued));
        assert_eq!(j.settle(&t("a"), &r("9"), actual, false), Ok(SettleOutcome::Queued));
        assert_eq!(j.len(), 2);
    }

    #[test]
    fn a_tenant_waits_with_at_most_its_share_of_operations_and_a_retry_is_still_answered() {
        let mut j = Offline::default();
        for i in 0..MAX_WAITING_PER_TENANT {
            j.release(&t("a"), &r(&format!("q{i}"))).unwrap();
        }
        assert_eq!(j.admit(&t("a"), &r("new"), tok(1), 100), Err(Full));
        assert_eq!(j.release(&t("a"), &r("one-more")), Err(Full));
        let actual = TokenCount::parse("actual_tokens", 1).unwrap();
        assert_eq!(j.settle(&t("a"), &r("one-more"), actual, false), Err(Full));
        // What is already waiting is answered as before, and another tenant has room.
        assert_eq!(j.release(&t("a"), &r("q0")), Ok(ReleaseOutcome::Queued));
        assert!(matches!(j.admit(&t("b"), &r("new"), tok(1), 100), Ok(ReserveOutcome::Reserved(_))));
        assert_eq!(j.len(), MAX_WAITING_PER_TENANT + 1);
    }

    #[test]
    fn a_change_taken_back_leaves_the_journal_as_before_it() {
        let mut j = Offline::default();
        let actual = TokenCount::parse("actual_tokens", 5).unwrap();
        j.admit(&t("a"), &r("1"), tok(10), 100).unwrap();
        j.admit(&t("a"), &r("2"), tok(10), 100).unwrap();
        j.settle(&t("a"), &r("2"), actual, false).unwrap();
        j.settle(&t("a"), &r("9"), actual, false).unwrap();
        j.take_back(&t("a"), &r("1"), Change::Admission);
        j.take_back(&t("a"), &r("2"), Change::Close);
        j.take_back(&t("a"), &r("9"), Change::Queued);
        assert!(!j.holds_admission(&t("a"), &r("1")), "the admission is gone");
        assert_eq!(j.snapshot(), vec![(t("a"), Op::Admit { request: r("2"), tokens: tok(10), close: None })]);
        // The allowance counts only what stayed.
        let Ok(ReserveOutcome::Refused(refusal)) = j.admit(&t("a"), &r("3"), tok(100), 100) else { panic!() };
        assert_eq!(refusal.available, 90);
    }
}
