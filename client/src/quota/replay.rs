//! Charging Redis, once it answers again, with what was admitted or queued in this
//! process while it was away (the journal in [`super::offline`]).

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::offline::{self, OfflineSummary};
use super::{QuotaError, Quotas, RequestId, TenantId};
use crate::scripts;

/// One operation the journal holds for Redis, as the control plane sees it (to set aside
/// those of tenants that no longer exist: the dead-letter list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingOp {
    pub tenant: TenantId,
    pub request_id: RequestId,
    /// `admit` (admitted here), `settle` or `release` (of a reservation Redis holds).
    pub operation: &'static str,
    /// Tokens admitted here (`admit`).
    pub tokens: Option<u64>,
    /// Tokens settled (`settle`, or an `admit` closed by a settle).
    pub actual: Option<u64>,
    /// How an admission made here was closed: `settled`, `released`, or open (`None`).
    pub closed: Option<&'static str>,
}

impl WaitingOp {
    fn of(tenant: &TenantId, op: &offline::Op) -> Self {
        let mut out = Self {
            tenant: tenant.clone(),
            request_id: op.request().clone(),
            operation: "admit",
            tokens: None,
            actual: None,
            closed: None,
        };
        match op {
            offline::Op::Admit { tokens, close, .. } => {
                out.tokens = Some(tokens.get());
                match close {
                    Some(offline::Close::Settle { actual, .. }) => {
                        out.closed = Some("settled");
                        out.actual = Some(actual.get());
                    }
                    Some(offline::Close::Release) => out.closed = Some("released"),
                    None => {}
                }
            }
            offline::Op::Settle { actual, .. } => {
                out.operation = "settle";
                out.actual = Some(actual.get());
            }
            offline::Op::Release { .. } => out.operation = "release",
        }
        out
    }
}

impl Quotas {
    /// The journal file's path (`None`: the journal is in memory only).
    pub fn journal_path(&self) -> Option<std::path::PathBuf> {
        self.inner.offline.lock().expect("offline journal lock").path()
    }

    /// Every operation waiting for Redis, in order.
    pub fn waiting(&self) -> Vec<WaitingOp> {
        let journal = self.inner.offline.lock().expect("offline journal lock");
        journal.snapshot().iter().map(|(tenant, op)| WaitingOp::of(tenant, op)).collect()
    }

    /// Takes `waiting` out of the journal (each only if it is still as it was read), for a
    /// caller that has kept it elsewhere (the control plane's dead-letter list, for tenants
    /// that no longer exist); returns how many were taken out once that is on disk.
    pub async fn set_aside(&self, waiting: &[WaitingOp]) -> std::io::Result<usize> {
        let (taken, acks) = {
            let mut journal = self.inner.offline.lock().expect("offline journal lock");
            let mut taken = 0;
            for (tenant, op) in journal.snapshot() {
                if waiting.contains(&WaitingOp::of(&tenant, &op)) {
                    journal.remove(&tenant, &op);
                    taken += 1;
                }
            }
            if let Some(m) = &self.inner.metrics {
                m.offline_pending.set(journal.len() as i64);
            }
            if journal.is_empty() {
                self.inner.has_offline.store(false, Ordering::Release);
            }
            (taken, journal.take_acks())
        };
        super::journal::synced(acks).await?;
        Ok(taken)
    }

    /// What this process admitted or queued while Redis was away and has not yet charged.
    pub fn offline_summary(&self) -> OfflineSummary {
        self.inner.offline.lock().expect("offline journal lock").summary()
    }

    /// Lets the journal file go (at shutdown): what was appended is written and synced, the
    /// file is unlocked for the next process; the journal goes on in memory only.
    pub fn close_journal(&self) {
        self.inner.offline.lock().expect("offline journal lock").detach();
    }

    /// Keeps the offline journal in a file at `path` too (created with its folder, locked
    /// for this process), and takes in what the file holds: what a process admitted while
    /// Redis was away and had not charged to it when it stopped. Returns what is waiting.
    pub fn open_journal(&self, path: &std::path::Path) -> std::io::Result<OfflineSummary> {
        let (file, entries) = super::journal::JournalFile::open(path)?;
        let mut journal = self.inner.offline.lock().expect("offline journal lock");
        journal.attach(file, entries);
        if !journal.is_empty() {
            self.inner.has_offline.store(true, Ordering::Release);
            tracing::warn!(path = %path.display(), operations = journal.len(), "the quota journal holds operations from before a restart: charged to redis when it answers");
        }
        if let Some(m) = &self.inner.metrics {
            m.offline_pending.set(journal.len() as i64);
        }
        Ok(journal.summary())
    }

    /// Keeps the offline journal on `disk` (a disk that fills up, in tests of the fail-closed
    /// path) instead of a file; nothing is read back.
    #[doc(hidden)]
    pub fn journal_on(&self, disk: impl super::JournalDisk) -> std::io::Result<()> {
        let file = super::journal::JournalFile::on(disk, std::path::Path::new("(test disk)"))?;
        self.inner.offline.lock().expect("offline journal lock").attach(file, Vec::new());
        Ok(())
    }

    /// Charges to Redis everything admitted or queued while it was away. Runs by itself
    /// before the next operation once Redis answers; callers may also run it on a timer.
    pub async fn flush_offline(&self) -> Result<usize, QuotaError> {
        if !self.inner.has_offline.load(Ordering::Acquire) {
            return Ok(0);
        }
        // One flush at a time; other callers go on with their own operation meanwhile.
        if self.inner.flushing.swap(true, Ordering::AcqRel) {
            return Ok(0);
        }
        let result = self.flush_journal().await;
        self.inner.flushing.store(false, Ordering::Release);
        result
    }

    /// One replayed call; a tenant Redis does not hold (lost, not republished yet) keeps
    /// the operation in the journal.
    async fn replay_call(
        &self,
        name: &'static str,
        script: &crate::scripts::QuotaFn,
        tenant: &super::TenantId,
        extra: &[String],
    ) -> Result<(), QuotaError> {
        let reply = self.call_direct(name, script, tenant, extra).await?;
        if matches!(reply.first(), Some(redis::Value::BulkString(tag)) if tag == b"unknown_tenant") {
            return Err(QuotaError::UnknownTenant(tenant.clone()));
        }
        Ok(())
    }

    /// Replays one operation of the journal.
    async fn replay_op(&self, tenant: &super::TenantId, op: &offline::Op) -> Result<(), QuotaError> {
        let settle_args = |request: &super::RequestId, actual: &super::TokenCount, partial: bool| {
            [request.as_str().to_owned(), actual.get().to_string(), if partial { "1" } else { "0" }.to_owned()]
        };
        match op {
            offline::Op::Admit { request, tokens, close } => {
                let extra = [
                    request.as_str().to_owned(),
                    tokens.get().to_string(),
                    "1".to_owned(),
                    String::new(),
                    String::new(),
                ];
                self.replay_call("reserve_quota", &scripts::quota().reserve, tenant, &extra).await?;
                match close {
                    Some(offline::Close::Settle { actual, partial }) => {
                        let extra = settle_args(request, actual, *partial);
                        self.replay_call("settle_quota", &scripts::quota().settle, tenant, &extra).await?;
                    }
                    Some(offline::Close::Release) => {
                        let extra = [request.as_str().to_owned()];
                        self.replay_call("release_quota", &scripts::quota().release, tenant, &extra).await?;
                    }
                    None => {}
                }
            }
            offline::Op::Settle { request, actual, partial } => {
                let extra = settle_args(request, actual, *partial);
                self.replay_call("settle_quota", &scripts::quota().settle, tenant, &extra).await?;
            }
            offline::Op::Release { request } => {
                let extra = [request.as_str().to_owned()];
                self.replay_call("release_quota", &scripts::quota().release, tenant, &extra).await?;
            }
        }
        Ok(())
    }

    /// Replays every operation in order. One that fails for its own reason (its tenant not
    /// republished yet) stays and the others go on; Redis unreachable stops the replay.
    async fn flush_journal(&self) -> Result<usize, QuotaError> {
        let work = self.inner.offline.lock().expect("offline journal lock").snapshot();
        let mut done = 0;
        let mut first_error = None;
        for (tenant, op) in work {
            match self.replay_op(&tenant, &op).await {
                Ok(()) => {}
                Err(QuotaError::Redis(e)) if crate::connection::is_unreachable(&e) => return Err(QuotaError::Redis(e)),
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            }
            let acks = {
                let mut journal = self.inner.offline.lock().expect("offline journal lock");
                journal.remove(&tenant, &op);
                if let Some(m) = &self.inner.metrics {
                    m.offline_pending.set(journal.len() as i64);
                    m.fallback.with_label_values(&["any", "replayed"]).inc();
                }
                if journal.is_empty() {
                    self.inner.has_offline.store(false, Ordering::Release);
                }
                journal.take_acks()
            };
            // On disk before the next operation: a restart replays nothing twice (a line
            // that failed only means a harmless second replay after a restart).
            let _ = super::journal::synced(acks).await;
            done += 1;
        }
        if done > 0 {
            tracing::info!(operations = done, "charged to redis what was admitted while it was unreachable");
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}
