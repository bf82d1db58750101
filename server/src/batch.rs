//! Look-ups made by many requests at once, answered in batches: one query for every key
//! asked while the previous query ran (at most [`MAX_BATCH`]), so a flood of requests
//! costs a few queries, not one each. After a query fails or a look-up times out,
//! [`Batcher::get`] fails at once for [`COOL_DOWN`] (a store that is away costs callers who
//! would go on without it nothing, not a timeout each); [`Batcher::get_waiting`], for
//! callers who cannot go on without an answer, always asks.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// The most keys one query asks for.
pub const MAX_BATCH: usize = 500;
/// The most look-ups waiting for a query: beyond it, a look-up fails at once (`Full`).
pub const MAX_WAITING: usize = 10_000;
/// How long look-ups fail at once after a failed query or a timed-out look-up.
pub const COOL_DOWN: Duration = Duration::from_secs(5);

/// Why a look-up has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{MAX_WAITING} look-ups are waiting already")]
    Full,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the look-up failed: {0}")]
    Failed(String),
    #[error("a look-up failed or timed out less than {COOL_DOWN:?} ago: not asked")]
    CoolingDown,
}

type Reply<V> = oneshot::Sender<Result<Option<V>, LookupError>>;

/// Batched look-ups of `K` → `V` (absent keys: `None`).
pub struct Batcher<K, V> {
    tx: mpsc::Sender<(K, Reply<V>)>,
    /// Until when look-ups fail at once (after a failure).
    cool_until: Arc<Mutex<Option<Instant>>>,
}

impl<K, V> Clone for Batcher<K, V> {
    fn clone(&self) -> Self {
        Self { tx: self.tx.clone(), cool_until: self.cool_until.clone() }
    }
}

fn cool_down(until: &Mutex<Option<Instant>>) {
    *until.lock().expect("cool-down lock") = Some(Instant::now() + COOL_DOWN);
}

impl<K, V> Batcher<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    /// Starts the task that runs `query` for each batch (on the current Tokio runtime); it
    /// ends when every `Batcher` clone is dropped.
    pub fn start<F, Fut>(query: F) -> Self
    where
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, String>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel::<(K, Reply<V>)>(MAX_WAITING);
        let query = Arc::new(query);
        let cool_until = Arc::new(Mutex::new(None));
        let failed = cool_until.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                // Look-ups whose caller stopped waiting (timed out) are not asked for.
                batch.retain(|(_, reply)| !reply.is_closed());
                if batch.is_empty() {
                    continue;
                }
                let mut keys: Vec<K> = batch.iter().map(|(k, _)| k.clone()).collect();
                let mut seen = std::collections::HashSet::with_capacity(keys.len());
                keys.retain(|k| seen.insert(k.clone()));
                let answer = query(keys).await;
                if answer.is_err() {
                    cool_down(&failed);
                }
                for (key, reply) in batch {
                    let _ = reply.send(match &answer {
                        Ok(found) => Ok(found.get(&key).cloned()),
                        Err(e) => Err(LookupError::Failed(e.clone())),
                    });
                }
            }
        });
        Self { tx, cool_until }
    }

    /// The value of `key`, answered with the other keys asked meanwhile, within `timeout`;
    /// `CoolingDown` at once less than [`COOL_DOWN`] after a failure.
    pub async fn get(&self, key: K, timeout: Duration) -> Result<Option<V>, LookupError> {
        {
            let mut until = self.cool_until.lock().expect("cool-down lock");
            match *until {
                Some(t) if Instant::now() < t => return Err(LookupError::CoolingDown),
                Some(_) => *until = None,
                None => {}
            }
        }
        self.get_waiting(key, timeout).await
    }

    /// [`Batcher::get`] for a caller who cannot go on without an answer: asked even while
    /// cooling down.
    pub async fn get_waiting(&self, key: K, timeout: Duration) -> Result<Option<V>, LookupError> {
        let (reply, answer) = oneshot::channel();
        self.tx.try_send((key, reply)).map_err(|_| LookupError::Full)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LookupError::Failed("the look-up task stopped".into())),
            Err(_) => {
                cool_down(&self.cool_until);
                Err(LookupError::Timeout(timeout))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn concurrent_look_ups_share_queries_and_each_gets_its_own_answer() {
        let queries = Arc::new(AtomicUsize::new(0));
        let counted = queries.clone();
        let batcher = Batcher::start(move |keys: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(keys.into_iter().filter(|k| k % 2 == 0).map(|k| (k, k * 10)).collect())
            }
        });
        let asks = (0..200u32).map(|k| {
            let b = batcher.clone();
            tokio::spawn(async move { (k, b.get(k, Duration::from_secs(5)).await) })
        });
        for ask in asks.collect::<Vec<_>>() {
            let (k, answer) = ask.await.unwrap();
            assert_eq!(answer, Ok(if k % 2 == 0 { Some(k * 10) } else { None }), "key {k}");
        }
        let n = queries.load(Ordering::SeqCst);
        assert!((1..200).contains(&n), "{n} queries for 200 look-ups");
    }

    #[tokio::test]
    async fn a_failed_query_fails_its_look_ups_by_name_and_the_next_ones_at_once_for_a_while() {
        let queries = Arc::new(AtomicUsize::new(0));
        let counted = queries.clone();
        let failing = Batcher::start(move |_: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<HashMap<u32, u32>, _>("no database".to_owned()) }
        });
        assert_eq!(failing.get(1, Duration::from_secs(5)).await, Err(LookupError::Failed("no database".into())));
        assert_eq!(failing.get(2, Duration::from_secs(5)).await, Err(LookupError::CoolingDown));
        assert_eq!(queries.load(Ordering::SeqCst), 1, "the cool-down asks nothing");
        // Once the cool-down has passed, one query tries again.
        *failing.cool_until.lock().unwrap() = Some(Instant::now());
        assert_eq!(failing.get(3, Duration::from_secs(5)).await, Err(LookupError::Failed("no database".into())));
        assert_eq!(queries.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_slow_query_times_its_look_up_out_and_cools_the_next_ones_down() {
        let slow = Batcher::start(|_: Vec<u32>| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(HashMap::<u32, u32>::new())
        });
        let limit = Duration::from_millis(50);
        assert_eq!(slow.get(1, limit).await, Err(LookupError::Timeout(limit)));
        assert_eq!(slow.get(2, limit).await, Err(LookupError::CoolingDown));
        // A caller who cannot go on without an answer still asks (and here times out).
        assert_eq!(slow.get_waiting(3, limit).await, Err(LookupError::Timeout(limit)));
    }
}
