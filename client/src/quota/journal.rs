//! The offline journal on disk: every change to [`super::offline::Offline`] is appended as
//! one JSON line to a local file and synced before the caller is answered, so a process
//! that restarts while Redis is away replays what it admitted. One writer thread appends
//! and syncs what has queued up meanwhile with one `fsync` (a batch), then acknowledges
//! each line; when the journal empties (everything charged to Redis), the file is cut to
//! nothing. The file is locked: one process per journal.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

/// One change to the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(super) enum Entry {
    /// Admitted here (`tokens`).
    Admit { tenant: String, request: String, tokens: u64 },
    /// An admission closed here: settled with `actual`, or released (`actual` absent).
    Close { tenant: String, request: String, actual: Option<u64>, partial: bool },
    /// A settle of a reservation Redis holds, queued.
    Settle { tenant: String, request: String, actual: u64, partial: bool },
    /// A release of a reservation Redis holds, queued.
    Release { tenant: String, request: String },
    /// Charged to Redis: the operation of this request leaves the journal.
    Done { tenant: String, request: String },
}

enum Message {
    Line(String, tokio::sync::oneshot::Sender<std::io::Result<()>>),
    /// The journal is empty: cut the file.
    Truncate,
}

/// The appending side: cheap to clone; lines are written in the order they are sent.
#[derive(Clone)]
pub(super) struct JournalFile {
    tx: mpsc::Sender<Message>,
    path: PathBuf,
}

/// Waits for lines to be on disk.
pub(super) type Acks = Vec<tokio::sync::oneshot::Receiver<std::io::Result<()>>>;

impl JournalFile {
    /// Opens (creating it and its folder) and locks the journal at `path`; returns the
    /// writer and the entries the file holds, in order. A torn last line (a crash during
    /// a write) is skipped.
    pub(super) fn open(path: &Path) -> std::io::Result<(Self, Vec<Entry>)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).read(true).append(true).open(path)?;
        file.try_lock().map_err(|e| {
            std::io::Error::other(format!("the quota journal {} is used by another process: {e}", path.display()))
        })?;
        let mut entries = Vec::new();
        for (n, line) in BufReader::new(&file).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Entry>(&line) {
                Ok(entry) => entries.push(entry),
                Err(e) => {
                    tracing::warn!(path = %path.display(), line = n + 1, error = %e, "skipped an unreadable quota journal line")
                }
            }
        }
        // A crash during a write leaves a torn last line: end it, so the next entry starts
        // on a line of its own (the torn one is skipped above).
        let mut file = file;
        if file.metadata()?.len() > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut last = [0u8; 1];
            file.seek(SeekFrom::End(-1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                file.sync_data()?;
            }
        }
        let (tx, rx) = mpsc::channel();
        let writer_path = path.to_owned();
        std::thread::Builder::new().name("quota-journal".into()).spawn(move || write_loop(file, &writer_path, rx))?;
        Ok((Self { tx, path: path.to_owned() }, entries))
    }

    /// Queues one entry; the returned receiver answers once it is synced.
    pub(super) fn append(&self, entry: &Entry, acks: &mut Acks) {
        let (done, wait) = tokio::sync::oneshot::channel();
        let line = serde_json::to_string(entry).expect("journal entries serialize");
        if self.tx.send(Message::Line(line, done)).is_ok() {
            acks.push(wait);
        } else {
            tracing::error!(path = %self.path.display(), "the quota journal writer stopped: entry kept in memory only");
        }
    }

    /// Cuts the file (the journal is empty).
    pub(super) fn truncate(&self) {
        let _ = self.tx.send(Message::Truncate);
    }
}

/// Waits until every line in `acks` is on disk; a failure is logged (the entry is still
/// in memory and is charged to Redis when it answers, but would not survive a restart).
pub(super) async fn synced(acks: Acks) {
    for ack in acks {
        match ack.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "writing the quota journal failed: kept in memory only"),
            Err(_) => tracing::error!("the quota journal writer stopped: kept in memory only"),
        }
    }
}

fn write_loop(mut file: File, path: &Path, rx: mpsc::Receiver<Message>) {
    while let Ok(first) = rx.recv() {
        // Everything queued meanwhile goes out with one sync.
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut waiting = Vec::new();
        let mut result: std::io::Result<()> = Ok(());
        for message in batch {
            match message {
                Message::Line(line, done) => {
                    if result.is_ok() {
                        result = file.write_all(line.as_bytes()).and_then(|()| file.write_all(b"\n"));
                    }
                    waiting.push(done);
                }
                Message::Truncate => {
                    if result.is_ok() {
                        result = file.set_len(0);
                    }
                }
            }
        }
        if result.is_ok() {
            result = file.sync_data();
        }
        if let Err(e) = &result {
            tracing::error!(path = %path.display(), error = %e, "writing the quota journal failed");
        }
        for done in waiting {
            let _ = done.send(result.as_ref().map(|_| ()).map_err(|e| std::io::Error::new(e.kind(), e.to_string())));
        }
    }
}
