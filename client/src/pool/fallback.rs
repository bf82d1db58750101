//! The degradation chain below Redis: a local pool built with the engine from the last
//! snapshot this client saw, else weighted random over the application's static weights.

use std::collections::VecDeque;

use engine::order::build_batch;
use engine::{Apportioner, BatchSize, Weights};
use rand_chacha::ChaCha8Rng;

use super::{admin, Degrade, Draw, DrawSource, PoolError, PoolName, Pools, MAX_BATCH};

/// This process's own pool: the engine's batches over the last snapshot seen, drawn in turn.
pub(super) struct LocalPool {
    version: u64,
    weights: Weights,
    apportioner: Apportioner,
    ordering: engine::Ordering,
    batch: BatchSize,
    queue: VecDeque<usize>,
}

impl LocalPool {
    fn next(&mut self, rng: &mut ChaCha8Rng) -> usize {
        if self.queue.is_empty() {
            let counts = self.apportioner.next_counts(self.batch);
            let tail = engine::order::TailRun::of(&[]);
            self.queue.extend(build_batch(self.ordering, &counts, tail, rng));
        }
        self.queue.pop_front().expect("a batch of at least one ticket")
    }
}

impl Pools {
    /// Serves a draw from the next level down: the local pool, else static weights.
    pub(super) fn degrade(&self, pool: &PoolName, why: Degrade) -> Result<Draw, PoolError> {
        let mut rng = self.inner.rng.lock().expect("rng lock");
        {
            let mut cache = self.inner.cache.lock().expect("pool cache lock");
            // Only a pool with an entry (a snapshot seen) has a local pool: a name sent from
            // outside makes none.
            if let Some(entry) = cache.get_mut(pool).filter(|e| e.local.is_none()) {
                if let Some(snapshot) = &entry.snapshot {
                    if let Ok(weights) = admin::effective_weights(&snapshot.channels(), &entry.ejected) {
                        if let Ok(batch) = BatchSize::new(u64::from(snapshot.batch_size), MAX_BATCH) {
                            entry.local = Some(LocalPool {
                                version: snapshot.version,
                                apportioner: Apportioner::new(weights.clone()),
                                weights,
                                ordering: snapshot.ordering,
                                batch,
                                queue: VecDeque::new(),
                            });
                        }
                    }
                }
            }
            if let Some(local) = cache.get_mut(pool).and_then(|e| e.local.as_mut()) {
                let i = local.next(&mut rng);
                let draw = Draw {
                    member: local.weights.name(i).to_owned(),
                    pool: pool.clone(),
                    version: local.version,
                    source: DrawSource::Local,
                    tier: None,
                };
                drop(cache);
                return Ok(self.served(draw));
            }
        }
        if let (Some(table), Some(weights)) = (self.inner.statics.get(pool), self.inner.static_weights.get(pool)) {
            let i = table.pick(&mut *rng);
            let draw = Draw {
                member: weights.name(i).to_owned(),
                pool: pool.clone(),
                version: 0,
                source: DrawSource::Static,
                tier: None,
            };
            return Ok(self.served(draw));
        }
        match why {
            Degrade::Unreachable(source) => Err(PoolError::Unavailable { pool: pool.clone(), source }),
            Degrade::Empty => Err(PoolError::Exhausted { pool: pool.clone(), skipped_ejected: 0, skipped_capped: 0 }),
            Degrade::Missing => Err(PoolError::UnknownPool(pool.clone())),
        }
    }
}
