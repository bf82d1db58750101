//! Ticket leases: an instance takes a run of a pool's tickets in one script call (the
//! draws waiting now plus some ahead) and serves the rest from memory, in order, for at
//! most the lease's hold time. Unserved tickets go back to the head of the pool's list
//! (`lua/return_tickets.lua`) when the hold ends (a timer per lease) and on shutdown
//! ([`Pools::return_leases`]); tickets of a version the pool no longer has, or of a list
//! rebuilt since, are dropped instead.
//!
//! What holds: each ticket is served once or returned, so whole batches stay exact across
//! instances; a returned ticket's draw is taken back from the day's hits; an ejection or a
//! new version reaches leased tickets within the hold. Pools with caps and `tiers` pools
//! are not leased (a cap is decided per draw; a tier ticket is not a member). Off by
//! default ([`Pools::set_ticket_leases`]); it needs coalescing on (the default).

use std::collections::VecDeque;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::{Duration, Instant};

use redis::Value;

use super::reply::Fields;
use super::{Draw, PoolError, PoolKind, PoolName, Pools};
use crate::scripts;

/// How ticket leases behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// The most tickets one lease takes (at least 1).
    pub max: usize,
    /// How long a leased ticket may wait in memory before it is returned.
    pub hold: Duration,
}

/// The size a pool's first lease asks for; it then doubles while leases are served out
/// within half their hold, and halves when one ends with tickets left.
const FIRST_SIZE: usize = 8;

/// How long [`Pools::return_leases`] waits for returns already under way.
const RETURNS_SETTLE: Duration = Duration::from_secs(5);

/// Where leased tickets were counted: the day whose hits hold them and the state's count
/// of list rebuilds when they were taken (from the draw script's reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Counted {
    pub day: String,
    pub rebuilds: String,
}

/// One pool's lease: the tickets not yet served, in order.
pub(super) struct Lease {
    tickets: VecDeque<Draw>,
    counted: Option<Counted>,
    taken_at: Instant,
    /// Tells this lease from the next one (the hold timer returns only its own).
    id: u64,
    /// How many tickets the next lease asks for beyond the waiting draws.
    size: usize,
    /// The hold and the most tickets of the settings when these tickets were taken: a
    /// leased draw reads no settings lock.
    hold: Duration,
    max: usize,
    /// The pool's leased-draws counter and tickets-leased gauge, looked up once per pool
    /// (not per draw: a labelled metric's lookup hashes and locks).
    meters: Option<(prometheus::IntCounter, prometheus::IntGauge)>,
}

impl Default for Lease {
    fn default() -> Self {
        Self {
            tickets: VecDeque::new(),
            counted: None,
            taken_at: Instant::now(),
            id: 0,
            size: FIRST_SIZE,
            hold: Duration::ZERO,
            max: FIRST_SIZE,
            meters: None,
        }
    }
}

/// Tickets to give back: the pool, where they were counted, and the tickets in order.
pub(super) struct Unserved {
    pool: PoolName,
    counted: Counted,
    tickets: Vec<Draw>,
}

/// What a draw finds in its pool's lease.
pub(super) enum Leased {
    /// The next ticket.
    Ticket(Draw),
    /// The lease outlived its hold: these go back before the draw goes to Redis.
    Expired(Unserved),
    /// Nothing leased.
    Nothing,
}

impl Pools {
    /// Turns ticket leases on (`Some`) or off (`None`; tickets held now go back with their
    /// pool's next draw, when their hold ends or on [`Self::return_leases`]). A lease keeps
    /// the hold it was taken with.
    pub fn set_ticket_leases(&self, settings: Option<LeaseSettings>) {
        let settings = settings.map(|s| LeaseSettings { max: s.max.max(1), ..s });
        let mut current = self.inner.lease_settings.lock().expect("lease settings lock");
        *current = settings;
        self.inner.leases_on.store(settings.is_some(), AtomicOrdering::Relaxed);
    }

    /// Whether ticket leases are on now.
    pub(super) fn leases_on(&self) -> bool {
        self.inner.leases_on.load(AtomicOrdering::Relaxed)
    }

    /// Draws served from leases since the client was made.
    pub fn leased_draws(&self) -> u64 {
        self.inner.leased.load(AtomicOrdering::Relaxed)
    }

    /// Tickets held in leases now, over every pool (the count draws read without a lock;
    /// the tests hold it to the tickets served and returned).
    pub fn tickets_leased(&self) -> usize {
        self.inner.tickets_held.load(AtomicOrdering::Acquire)
    }

    /// The next ticket of `pool`'s lease, if it holds one within its hold time.
    pub(super) fn next_leased(&self, pool: &PoolName) -> Leased {
        // No ticket held anywhere (leases off, or served out and returned): no lock taken.
        if self.inner.tickets_held.load(AtomicOrdering::Acquire) == 0 {
            return Leased::Nothing;
        }
        // Leases turned off since these tickets were taken: they go back now.
        let on = self.leases_on();
        let mut leases = self.inner.leases.lock().expect("leases lock");
        let Some(lease) = leases.get_mut(pool).filter(|l| !l.tickets.is_empty()) else { return Leased::Nothing };
        let age = lease.taken_at.elapsed();
        if on && age <= lease.hold {
            let Some(draw) = lease.tickets.pop_front() else { return Leased::Nothing };
            self.inner.tickets_held.fetch_sub(1, AtomicOrdering::AcqRel);
            if lease.tickets.is_empty() && age <= lease.hold / 2 {
                // Served out within half the hold: the next lease may be larger.
                lease.size = (lease.size * 2).min(lease.max);
            }
            self.inner.leased.fetch_add(1, AtomicOrdering::Relaxed);
            if let Some((draws, held)) = &lease.meters {
                draws.inc();
                held.set(lease.tickets.len() as i64);
            }
            return Leased::Ticket(draw);
        }
        match self.take_unserved(pool, lease) {
            Some(unserved) => Leased::Expired(unserved),
            None => Leased::Nothing,
        }
    }

    /// How many tickets beyond the waiting draws the next shared call of `pool` takes for
    /// a lease: 0 with leases off, for a pool not known as a `channels` pool without caps,
    /// or while the pool's lease still holds tickets.
    pub(super) fn lease_extra(&self, pool: &PoolName) -> usize {
        if !self.leases_on() {
            return 0;
        }
        let Some(settings) = *self.inner.lease_settings.lock().expect("lease settings lock") else { return 0 };
        let leasable = self
            .inner
            .cache
            .lock()
            .expect("pool cache lock")
            .get(pool)
            .and_then(|c| {
                c.snapshot
                    .as_ref()
                    .map(|s| s.kind == PoolKind::Channels && s.caps.is_empty() && s.window_caps.is_none())
            })
            .unwrap_or(false);
        if !leasable {
            return 0;
        }
        let leases = self.inner.leases.lock().expect("leases lock");
        match leases.get(pool) {
            Some(lease) if !lease.tickets.is_empty() => 0,
            Some(lease) => lease.size.min(settings.max),
            None => FIRST_SIZE.min(settings.max),
        }
    }

    /// Keeps `tickets` (taken by a shared call beyond its draws) as the pool's lease, with a
    /// timer that gives back what is left when the hold ends. When the pool's lease still
    /// holds tickets (taken before these), these go back at once.
    pub(super) async fn keep_lease(&self, pool: &PoolName, counted: Counted, tickets: Vec<Draw>) {
        if tickets.is_empty() {
            return;
        }
        let settings = *self.inner.lease_settings.lock().expect("lease settings lock");
        let kept = settings.and_then(|settings| {
            let mut leases = self.inner.leases.lock().expect("leases lock");
            let lease = leases.entry(pool.clone()).or_default();
            if !lease.tickets.is_empty() {
                return None;
            }
            lease.tickets = tickets.iter().cloned().collect();
            self.inner.tickets_held.fetch_add(lease.tickets.len(), AtomicOrdering::AcqRel);
            lease.counted = Some(counted.clone());
            lease.taken_at = Instant::now();
            lease.id = self.inner.lease_ids.fetch_add(1, AtomicOrdering::Relaxed) + 1;
            (lease.hold, lease.max) = (settings.hold, settings.max);
            if lease.meters.is_none() {
                lease.meters = self.inner.metrics.as_ref().map(|m| {
                    let p = [pool.as_str()];
                    (m.leased_draws.with_label_values(&p), m.tickets_leased.with_label_values(&p))
                });
            }
            if let Some((_, held)) = &lease.meters {
                held.set(lease.tickets.len() as i64);
            }
            Some((lease.id, settings.hold))
        });
        let Some((id, hold)) = kept else {
            self.give_back(Unserved { pool: pool.clone(), counted, tickets }).await;
            return;
        };
        let (this, pool) = (self.clone(), pool.clone());
        let timer = async move {
            tokio::time::sleep(hold).await;
            let unserved = {
                let mut leases = this.inner.leases.lock().expect("leases lock");
                leases.get_mut(&pool).filter(|l| l.id == id).and_then(|l| this.take_unserved(&pool, l))
            };
            if let Some(unserved) = unserved {
                this.give_back(unserved).await;
            }
        };
        match &self.inner.runtime {
            Some(runtime) => drop(runtime.spawn(timer)),
            None => drop(tokio::spawn(timer)),
        }
    }

    /// Returns every leased ticket (on shutdown), and waits for returns already under way:
    /// pushed back to the head of its pool's list, or dropped where the pool has another
    /// version or a rebuilt list. Answers how many tickets went back to lists.
    pub async fn return_leases(&self) -> Result<usize, PoolError> {
        let all: Vec<Unserved> = {
            let mut leases = self.inner.leases.lock().expect("leases lock");
            leases.iter_mut().filter_map(|(pool, l)| self.take_unserved(pool, l)).collect()
        };
        let mut returned = 0;
        let mut failed = None;
        for unserved in all {
            match self.try_give_back(unserved).await {
                Ok(n) => returned += n,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        let waited = Instant::now();
        while self.inner.returning.load(AtomicOrdering::SeqCst) > 0 && waited.elapsed() < RETURNS_SETTLE {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(returned),
        }
    }

    /// Gives tickets back, logging (not answering) a failure.
    pub(super) async fn give_back(&self, unserved: Unserved) {
        let (pool, count) = (unserved.pool.clone(), unserved.tickets.len());
        if let Err(e) = self.try_give_back(unserved).await {
            tracing::warn!(pool = %pool, tickets = count, error = %e, "leased tickets could not be returned: lost");
        }
    }

    /// One `return_tickets` call per version among the tickets; how many went back to the
    /// list (the rest were of a version or a list the pool no longer has).
    async fn try_give_back(&self, unserved: Unserved) -> Result<usize, PoolError> {
        self.inner.returning.fetch_add(1, AtomicOrdering::SeqCst);
        let result = self.return_tickets(unserved).await;
        self.inner.returning.fetch_sub(1, AtomicOrdering::SeqCst);
        result
    }

    async fn return_tickets(&self, unserved: Unserved) -> Result<usize, PoolError> {
        let Unserved { pool, counted, tickets } = unserved;
        // A ticket drawn as a tier's member cannot go back into the list of tier tickets.
        let (tiered, tickets): (Vec<Draw>, Vec<Draw>) = tickets.into_iter().partition(|t| t.tier.is_some());
        if !tiered.is_empty() {
            tracing::warn!(pool = %pool, tickets = tiered.len(), "leased tickets of a tiers pool dropped");
        }
        let mut conn = self.inner.redis.connection().await.map_err(PoolError::Redis)?;
        let k = &self.inner.keys;
        let p = pool.as_str();
        let mut returned = 0;
        let mut rest = tickets.as_slice();
        while let Some(first) = rest.first() {
            let same = rest.iter().take_while(|t| t.version == first.version).count();
            let (run, after) = rest.split_at(same);
            let mut call = scripts::pool().return_tickets.key(k.pool_state(p));
            call.key(k.pool_tickets(p))
                .key(k.pool_hits(p, &counted.day))
                .key(k.pool_draw_log(p))
                .arg(first.version)
                .arg(&counted.rebuilds);
            for t in run {
                call.arg(&t.member);
            }
            let reply: Vec<Value> = call.invoke_async(&mut conn).await.map_err(PoolError::Redis)?;
            let f = Fields::new("return_tickets", &reply);
            if f.str(0)? == "returned" {
                returned += f.uint(1)? as usize;
            } else {
                tracing::info!(pool = %pool, version = first.version, tickets = run.len(), "leased tickets of an old list dropped");
            }
            rest = after;
        }
        Ok(returned)
    }

    /// Empties a lease into what must go back (`None` when it held nothing); the next lease
    /// asks for half as many tickets. The tickets leave the count of tickets held: call it
    /// under the leases lock.
    fn take_unserved(&self, pool: &PoolName, lease: &mut Lease) -> Option<Unserved> {
        if lease.tickets.is_empty() {
            return None;
        }
        lease.size = (lease.size / 2).max(1);
        let tickets: Vec<Draw> = lease.tickets.drain(..).collect();
        self.inner.tickets_held.fetch_sub(tickets.len(), AtomicOrdering::AcqRel);
        // Under the leases lock, so a lease kept meanwhile cannot be overwritten with 0.
        if let Some((_, held)) = &lease.meters {
            held.set(0);
        }
        // Tickets without their day cannot be given back (none are kept without one).
        let counted = lease.counted.clone()?;
        Some(Unserved { pool: pool.clone(), counted, tickets })
    }
}
