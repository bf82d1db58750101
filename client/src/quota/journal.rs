//! The offline journal on disk: every change to [`super::offline::Offline`] is appended as
//! one JSON line to a local file and synced before the caller is answered, so a process
//! that restarts while Redis is away replays what it admitted. One writer thread appends
//! and syncs what has queued up meanwhile with one `fsync` (a batch), then acknowledges
//! each line; when the journal empties (everything charged to Redis), the file is cut to
//! nothing. The file is locked: one process per journal.
//!
//! A batch whose write or sync fails is cut back off the file (no torn line stays for the
//! next batch to run into) and every line of it is answered with the error: its caller
//! takes the change back and answers a failure, so nothing is admitted that a restart
//! would not know (fail closed). When even the cut fails, the file may end in lines whose
//! changes were taken back: every later write is refused (the journal is torn) rather than
//! appended after them, until the journal empties (everything charged to Redis) and the file
//! is cut to nothing.

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

/// Where the journal's lines go: a file, or (in tests) a disk that fills up.
#[doc(hidden)]
pub trait JournalDisk: Send + 'static {
    /// Appends `bytes` at the end.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes what was appended durable.
    fn sync(&mut self) -> std::io::Result<()>;
    /// The length now, in bytes.
    fn size(&mut self) -> std::io::Result<u64>;
    /// Cuts to `len` bytes.
    fn cut(&mut self, len: u64) -> std::io::Result<()>;
}

impl JournalDisk for File {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    fn size(&mut self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn cut(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
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
        Ok((Self::on(file, path)?, entries))
    }

    /// A journal writing to `disk` (named `path` in logs), with no entries read back.
    pub(super) fn on(disk: impl JournalDisk, path: &Path) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let writer_path = path.to_owned();
        std::thread::Builder::new().name("quota-journal".into()).spawn(move || write_loop(disk, &writer_path, rx))?;
        Ok(Self { tx, path: path.to_owned() })
    }

    /// Queues one entry; the returned receiver answers once it is synced (or with the
    /// error that kept it off the disk).
    pub(super) fn append(&self, entry: &Entry, acks: &mut Acks) {
        let (done, wait) = tokio::sync::oneshot::channel();
        let line = serde_json::to_string(entry).expect("journal entries serialize");
        if let Err(mpsc::SendError(Message::Line(_, done))) = self.tx.send(Message::Line(line, done)) {
            tracing::error!(path = %self.path.display(), "the quota journal writer stopped");
            let _ = done.send(Err(std::io::Error::other("the quota journal writer stopped")));
        }
        acks.push(wait);
    }

    /// Where the journal is written.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Cuts the file (the journal is empty).
    pub(super) fn truncate(&self) {
        let _ = self.tx.send(Message::Truncate);
    }
}

/// Waits until every line in `acks` is on disk; the first failure is returned (and
/// logged): the caller takes its change back.
pub(super) async fn synced(acks: Acks) -> std::io::Result<()> {
    let mut first = Ok(());
    for ack in acks {
        let result = ack.await.unwrap_or_else(|_| Err(std::io::Error::other("the quota journal writer stopped")));
        if let Err(e) = result {
            tracing::error!(error = %e, "writing the quota journal failed");
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

fn write_loop(mut file: impl JournalDisk, path: &Path, rx: mpsc::Receiver<Message>) {
    // A failed batch that could not be cut back off the file: nothing more is written.
    let mut torn = false;
    while let Ok(first) = rx.recv() {
        // Everything queued meanwhile goes out with one sync.
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut waiting = Vec::new();
        let start = if torn {
            Err(std::io::Error::other(
                "an earlier failed write could not be cut off the quota journal: nothing more is written until it empties",
            ))
        } else {
            file.size()
        };
        let mut result: std::io::Result<()> = start.as_ref().map(|_| ()).map_err(copy);
        let mut cut_to_nothing = false;
        for message in batch {
            match message {
                Message::Line(mut line, done) => {
                    if result.is_ok() {
                        line.push('\n');
                        result = file.append(line.as_bytes());
                    }
                    waiting.push(done);
                }
                Message::Truncate if torn => {
                    // The journal is empty: cutting the file to nothing also drops the lines
                    // that were taken back, and the journal may be written again.
                    if file.cut(0).and_then(|()| file.sync()).is_ok() {
                        tracing::info!(path = %path.display(), "the quota journal is empty and cut: written again");
                        torn = false;
                    }
                }
                Message::Truncate => {
                    if result.is_ok() {
                        result = file.cut(0);
                        cut_to_nothing = true;
                    }
                }
            }
        }
        if result.is_ok() {
            result = file.sync();
        }
        if result.is_err() {
            // Nothing of a failed batch stays: its callers take their changes back. (Where it
            // began is unknown only when nothing of it was written.)
            if let Ok(start) = start {
                let back_to = if cut_to_nothing { 0 } else { start };
                if let Err(e) = file.cut(back_to).and_then(|()| file.sync()) {
                    tracing::error!(path = %path.display(), error = %e, "cutting a failed batch off the quota journal failed: no more writes until it empties");
                    torn = true;
                }
            }
        }
        if let Err(e) = &result {
            tracing::error!(path = %path.display(), error = %e, "writing the quota journal failed");
        }
        for done in waiting {
            let _ = done.send(result.as_ref().map(|_| ()).map_err(copy));
        }
    }
}

fn copy(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk whose first `appends_to_fail` appends and `cuts_to_fail` cuts fail.
    struct Flaky {
        data: Vec<u8>,
        appends_to_fail: usize,
        cuts_to_fail: usize,
    }

    impl JournalDisk for Flaky {
        fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
            // A failing append leaves part of its line behind, as a full disk can.
            if self.appends_to_fail > 0 {
                self.appends_to_fail -= 1;
                self.data.extend_from_slice(&bytes[..bytes.len() / 2]);
                return Err(std::io::Error::other("no space left"));
            }
            self.data.extend_from_slice(bytes);
            Ok(())
        }
        fn sync(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn size(&mut self) -> std::io::Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn cut(&mut self, len: u64) -> std::io::Result<()> {
            if self.cuts_to_fail > 0 {
                self.cuts_to_fail -= 1;
                return Err(std::io::Error::other("input/output error"));
            }
            self.data.truncate(len as usize);
            Ok(())
        }
    }

    fn write_one(journal: &JournalFile) -> std::io::Result<()> {
        let mut acks = Acks::new();
        journal.append(&Entry::Release { tenant: "a".into(), request: "1".into() }, &mut acks);
        acks.pop().expect("one ack").blocking_recv().expect("the writer answers")
    }

    #[test]
    fn a_failed_batch_cut_back_lets_the_next_write_through() {
        let journal =
            JournalFile::on(Flaky { data: Vec::new(), appends_to_fail: 1, cuts_to_fail: 0 }, Path::new("t")).unwrap();
        assert!(write_one(&journal).is_err());
        assert!(write_one(&journal).is_ok(), "the torn half line was cut off, the journal goes on");
    }

    #[test]
    fn a_failed_batch_that_cannot_be_cut_back_stops_every_later_write() {
        let journal =
            JournalFile::on(Flaky { data: Vec::new(), appends_to_fail: 1, cuts_to_fail: 1 }, Path::new("t")).unwrap();
        assert!(write_one(&journal).is_err());
        let later = write_one(&journal).expect_err("nothing is appended after lines that were taken back");
        assert!(later.to_string().contains("until"), "{later}");
        // Once the journal is empty, the file is cut to nothing and written again (a line
        // sent in the same batch as the cut still fails: the batch began torn).
        journal.truncate();
        let _ = write_one(&journal);
        assert!(write_one(&journal).is_ok(), "the cut file takes lines again");
    }
}
