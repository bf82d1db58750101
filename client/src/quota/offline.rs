//! What a client admitted, settled or released while Redis was unreachable, kept in order
//! until it is charged to Redis. Replaying is safe to repeat: every script is idempotent
//! per request id, so an entry leaves the journal only after its replay succeeded. With a
//! journal file ([`super::journal`]) every change is also appended to it, and the file is
//! read back at start.

use std::collections::HashMap;

use serde::Serialize;

use super::journal::{Acks, Entry, JournalFile};
use super::{Dimension, Refusal, ReleaseOutcome, Reservation, ReservationState, ReserveOutcome, SettleOutcome, Source};
use super::{RequestId, TenantId, TokenCount, Tokens};

/// The most operations one tenant may have waiting for Redis in one process: beyond it,
/// the tenant's operations are refused until Redis answers, so a flood cannot fill the
/// memory (nor the journal file).
pub const MAX_WAITING_PER_TENANT: usize = 10_000;

/// The most operations of all tenants together that may wait for Redis in one process
/// (many tenants each within their own share must not fill the memory either).
pub const MAX_WAITING: usize = 100_000;

/// Why an operation cannot be kept for Redis now (answered 503: retry later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotNow {
    /// The tenant has [`MAX_WAITING_PER_TENANT`] operations waiting, or the process
    /// [`MAX_WAITING`].
    Full,
    /// An earlier operation of this request id is still being written to the journal: its
    /// answer is not known yet (the write may fail and take it back), so a retry cannot be
    /// answered from it.
    Writing,
}

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

pub(super) struct Offline {
    ops: Vec<(TenantId, Op)>,
    file: Option<JournalFile>,
    /// Lines appended and not yet known to be on disk, for the caller to wait for.
    acks: Acks,
    /// Per request id, its lines appended and not yet known to be on disk.
    writing: HashMap<(TenantId, RequestId), usize>,
    /// Per tenant, how many of `ops` are its own (kept with `ops`: no count under the lock).
    per_tenant: HashMap<TenantId, usize>,
    /// [`MAX_WAITING_PER_TENANT`] and [`MAX_WAITING`] (smaller in tests).
    max_per_tenant: usize,
    max_total: usize,
}

impl Default for Offline {
    fn default() -> Self {
        Self {
            ops: Vec::new(),
            file: None,
            acks: Acks::new(),
            writing: HashMap::new(),
            per_tenant: HashMap::new(),
            max_per_tenant: MAX_WAITING_PER_TENANT,
            max_total: MAX_WAITING,
        }
    }
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
                        self.push(t, Op::Admit { request: r, tokens, close: None });
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
                        self.push(t, Op::Settle { request: r, actual, partial });
                    }
                }
            }
            Entry::Release { tenant, request } => {
                if let Some((t, r)) = parsed(&tenant, &request) {
                    if self.find(&t, &r).is_none() {
                        self.push(t, Op::Release { request: r });
                    }
                }
            }
            Entry::Done { tenant, request } => {
                self.ops.retain(|(t, op)| !(t.as_str() == tenant && op.request().as_str() == request));
                if let Ok(t) = TenantId::parse(&tenant) {
                    self.recount(&t);
                }
            }
        }
    }

    fn log(&mut self, entry: Entry) {
        if let Some(file) = &self.file {
            file.append(&entry, &mut self.acks);
        }
    }

    /// Appends a caller's change of `request`: until [`Self::written`] is called for it,
    /// another operation of the same request id is answered [`NotNow::Writing`].
    fn log_for(&mut self, tenant: &TenantId, request: &RequestId, entry: Entry) {
        if self.file.is_some() {
            self.log(entry);
            *self.writing.entry((tenant.clone(), request.clone())).or_default() += 1;
        }
    }

    /// `lines` of `request`'s changes are on disk now (or failed and were taken back).
    pub(super) fn written(&mut self, tenant: &TenantId, request: &RequestId, lines: usize) {
        let key = (tenant.clone(), request.clone());
        if let Some(n) = self.writing.get_mut(&key) {
            *n = n.saturating_sub(lines);
            if *n == 0 {
                self.writing.remove(&key);
            }
        }
    }

    fn not_writing(&self, tenant: &TenantId, request: &RequestId) -> Result<(), NotNow> {
        if self.writing.is_empty() || !self.writing.contains_key(&(tenant.clone(), request.clone())) {
            Ok(())
        } else {
            Err(NotNow::Writing)
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

    fn push(&mut self, tenant: TenantId, op: Op) {
        *self.per_tenant.entry(tenant.clone()).or_default() += 1;
        self.ops.push((tenant, op));
    }

    /// Counts `tenant`'s operations again (after some were taken out).
    fn recount(&mut self, tenant: &TenantId) {
        let n = self.ops.iter().filter(|(t, _)| t == tenant).count();
        if n == 0 {
            self.per_tenant.remove(tenant);
        } else {
            self.per_tenant.insert(tenant.clone(), n);
        }
    }

    fn has_room(&self, tenant: &TenantId) -> Result<(), NotNow> {
        if self.ops.len() >= self.max_total {
            return Err(NotNow::Full);
        }
        let waiting = self.per_tenant.get(tenant).copied().unwrap_or(0);
        if waiting < self.max_per_tenant {
            Ok(())
        } else {
            Err(NotNow::Full)
        }
    }

    /// Takes back a change whose journal line could not be written: its caller is
    /// answered with a failure, so nothing stays here that a restart would not know.
    pub(super) fn take_back(&mut self, tenant: &TenantId, request: &RequestId, change: Change) {
        let at = |t: &TenantId, op: &Op| t == tenant && op.request() == request;
        match change {
            Change::Admission => {
                self.ops.retain(|(t, op)| !(at(t, op) && matches!(op, Op::Admit { .. })));
                self.recount(tenant);
            }
            Change::Close => {
                if let Some(Op::Admit { close, .. }) = self.find(tenant, request) {
                    *close = None;
                }
            }
            Change::Queued => {
                self.ops.retain(|(t, op)| !(at(t, op) && matches!(op, Op::Settle { .. } | Op::Release { .. })));
                self.recount(tenant);
            }
        }
    }

    fn find(&mut self, tenant: &TenantId, request: &RequestId) -> Option<&mut Op> {
        self.ops.iter_mut().find(|(t, op)| t == tenant && op.request() == request).map(|(_, op)| op)
    }

    /// Admits `tokens` if the tenant's admissions since Redis went away stay within
    /// `allowance`; a retried request id gets its first answer once that is on disk.
    pub(super) fn admit(
        &mut self,
        tenant: &TenantId,
        request: &RequestId,
        tokens: Tokens,
        allowance: u64,
    ) -> Result<ReserveOutcome, NotNow> {
        self.not_writing(tenant, request)?;
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
        self.push(tenant.clone(), Op::Admit { request: request.clone(), tokens, close: None });
        self.log_for(
            tenant,
            request,
            Entry::Admit { tenant: tenant.to_string(), request: request.to_string(), tokens: tokens.get() },
        );
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
    ) -> Result<SettleOutcome, NotNow> {
        self.not_writing(tenant, request)?;
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
                    self.log_for(tenant, request, entry);
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
                self.push(tenant.clone(), Op::Settle { request: request.clone(), actual, partial });
                self.log_for(
                    tenant,
                    request,
                    Entry::Settle {
                        tenant: tenant.to_string(),
                        request: request.to_string(),
                        actual: actual.get(),
                        partial,
                    },
                );
                SettleOutcome::Queued
            }
        })
    }

    pub(super) fn release(&mut self, tenant: &TenantId, request: &RequestId) -> Result<ReleaseOutcome, NotNow> {
        self.not_writing(tenant, request)?;
        Ok(match self.find(tenant, request) {
            Some(Op::Admit { tokens, close, .. }) => match close {
                None => {
                    *close = Some(Close::Release);
                    let reserved = tokens.get();
                    self.log_for(
                        tenant,
                        request,
                        Entry::Close {
                            tenant: tenant.to_string(),
                            request: request.to_string(),
                            actual: None,
                            partial: false,
                        },
                    );
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
                self.push(tenant.clone(), Op::Release { request: request.clone() });
                self.log_for(
                    tenant,
                    request,
                    Entry::Release { tenant: tenant.to_string(), request: request.to_string() },
                );
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
            if let Some(n) = self.per_tenant.get_mut(tenant) {
                *n -= 1;
                if *n == 0 {
                    self.per_tenant.remove(tenant);
                }
            }
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
        assert_eq!(j.admit(&t("a"), &r("new"), tok(1), 100), Err(NotNow::Full));
        assert_eq!(j.release(&t("a"), &r("one-more")), Err(NotNow::Full));
        let actual = TokenCount::parse("actual_tokens", 1).unwrap();
        assert_eq!(j.settle(&t("a"), &r("one-more"), actual, false), Err(NotNow::Full));
        // What is already waiting is answered as before, and another tenant has room.
        assert_eq!(j.release(&t("a"), &r("q0")), Ok(ReleaseOutcome::Queued));
        assert!(matches!(j.admit(&t("b"), &r("new"), tok(1), 100), Ok(ReserveOutcome::Reserved(_))));
        assert_eq!(j.len(), MAX_WAITING_PER_TENANT + 1);
    }

    #[test]
    fn the_process_keeps_at_most_its_total_whatever_the_tenants() {
        let mut j = Offline { max_per_tenant: 3, max_total: 6, ..Offline::default() };
        for (tenant, i) in [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)] {
            j.release(&t(tenant), &r(&format!("q{i}"))).unwrap();
        }
        assert_eq!(j.release(&t("a"), &r("q3")), Err(NotNow::Full), "a has its share");
        assert_eq!(j.release(&t("c"), &r("q0")), Ok(ReleaseOutcome::Queued), "the sixth, of another tenant");
        assert_eq!(j.release(&t("d"), &r("q0")), Err(NotNow::Full), "the process is full");
        // Taken out, the counts go down with it.
        let done = j.snapshot()[0].clone();
        j.remove(&done.0, &done.1);
        assert_eq!(j.release(&t("a"), &r("q3")), Ok(ReleaseOutcome::Queued), "a has room again");
        assert_eq!(j.release(&t("b"), &r("q0")), Ok(ReleaseOutcome::Queued), "a retry is answered");
    }

    /// A disk in memory, for a journal whose lines are never awaited here.
    struct Memory(Vec<u8>);

    impl crate::quota::JournalDisk for Memory {
        fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
            self.0.extend_from_slice(bytes);
            Ok(())
        }
        fn sync(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&mut self) -> std::io::Result<u64> {
            Ok(self.0.len() as u64)
        }
        fn cut(&mut self, len: u64) -> std::io::Result<()> {
            self.0.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_retry_waits_until_the_first_attempts_line_is_written() {
        let mut j = Offline::default();
        j.attach(JournalFile::on(Memory(Vec::new()), std::path::Path::new("memory")).unwrap(), Vec::new());
        assert!(matches!(j.admit(&t("a"), &r("1"), tok(10), 100), Ok(ReserveOutcome::Reserved(_))));
        assert_eq!(j.take_acks().len(), 1);
        // Until the line is on disk, the first answer is not known: the write may fail and
        // take the admission back.
        assert_eq!(j.admit(&t("a"), &r("1"), tok(10), 100), Err(NotNow::Writing));
        let actual = TokenCount::parse("actual_tokens", 5).unwrap();
        assert_eq!(j.settle(&t("a"), &r("1"), actual, false), Err(NotNow::Writing));
        assert_eq!(j.release(&t("a"), &r("1")), Err(NotNow::Writing));
        // Other request ids go on.
        assert!(matches!(j.admit(&t("a"), &r("2"), tok(10), 100), Ok(ReserveOutcome::Reserved(_))));
        j.written(&t("a"), &r("1"), 1);
        let Ok(ReserveOutcome::Reserved(again)) = j.admit(&t("a"), &r("1"), tok(10), 100) else { panic!() };
        assert!(again.replayed, "answered from the journal once written");
        assert!(matches!(j.settle(&t("a"), &r("1"), actual, false), Ok(SettleOutcome::Settled { .. })));
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
