//! Leadership of one job across instances: a Postgres session advisory lock, held on a
//! dedicated connection for as long as this instance lives. When the leader stops (or its
//! connection breaks), Postgres frees the lock and another instance takes it on its next
//! tick: failover within one job interval.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool};
use tokio::sync::Mutex;

/// How long a leadership check may take before it counts as failed.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The advisory lock key of a job: a stable hash of its name (FNV-1a, 64 bits).
pub fn lock_key(job: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("tessera:job:{job}").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}

/// Whether this instance leads one job.
pub struct Leadership {
    db: PgPool,
    key: i64,
    job: &'static str,
    held: Mutex<Option<PgConnection>>,
    /// Set by [`Leadership::resign`]: this instance stopped and never leads again, even if
    /// a tick already under way asks.
    resigned: AtomicBool,
    /// Where [`Leadership::recording`] asked every check's answer to go (1: leading).
    gauge: Option<prometheus::IntGauge>,
}

impl Leadership {
    /// Not leading yet; [`Leadership::ensure`] tries.
    pub fn new(db: PgPool, job: &'static str) -> Self {
        Self { db, key: lock_key(job), job, held: Mutex::new(None), resigned: AtomicBool::new(false), gauge: None }
    }

    /// Records whether this instance leads, in `leader`'s series of the job, at every
    /// check (0 until the first): the alert on jobs that no instance leads reads it. A
    /// check that fails (Postgres cannot say) records 0, since no lock is held.
    pub fn recording(mut self, leader: &prometheus::IntGaugeVec) -> Self {
        let gauge = leader.with_label_values(&[self.job]);
        gauge.set(0);
        self.gauge = Some(gauge);
        self
    }

    fn record(&self, leading: bool) {
        if let Some(gauge) = &self.gauge {
            gauge.set(i64::from(leading));
        }
    }

    /// True when this instance leads the job: it still holds the lock (its connection
    /// answers), or it just took it. False when another instance holds it, or after
    /// [`Leadership::resign`].
    pub async fn ensure(&self) -> anyhow::Result<bool> {
        let leading = self.check().await;
        self.record(matches!(leading, Ok(true)));
        leading
    }

    async fn check(&self) -> anyhow::Result<bool> {
        let mut held = self.held.lock().await;
        if self.resigned.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if let Some(conn) = held.as_mut() {
            if matches!(tokio::time::timeout(TIMEOUT, conn.ping()).await, Ok(Ok(()))) {
                return Ok(true);
            }
            tracing::warn!(job = self.job, "lost the leadership connection; trying to lead again");
            *held = None;
        }
        let options = self.db.connect_options();
        let mut conn = tokio::time::timeout(TIMEOUT, PgConnection::connect_with(&options))
            .await
            .context("opening the leadership connection: timed out")?
            .context("opening the leadership connection")?;
        let taken: bool = tokio::time::timeout(TIMEOUT, crate::store::try_advisory_lock(&mut conn, self.key))
            .await
            .context("pg_try_advisory_lock: timed out")?
            .context("pg_try_advisory_lock")?;
        if taken {
            tracing::info!(job = self.job, "this instance now leads the job");
            *held = Some(conn);
        }
        Ok(taken)
    }

    /// Gives the job up for good (the lock goes with the connection, closed now rather than
    /// whenever the last reference to this leadership is dropped), so another instance
    /// takes the job on its next tick.
    pub async fn resign(&self) {
        self.resigned.store(true, Ordering::SeqCst);
        if let Some(conn) = self.held.lock().await.take() {
            let _ = conn.close().await;
        }
        self.record(false);
    }
}
