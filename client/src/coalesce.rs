//! One coalescer for the calls that can share a Redis round trip: concurrent draws of one
//! pool, concurrent reserves (or settles) of one tenant.
//!
//! While a shared call for a key is in flight, the requests that arrive for that key wait;
//! the next call takes them together (up to the configured maximum), in arrival order.
//! Up to `lanes` calls of one key may be in flight at once (each takes the requests waiting
//! when it starts), so that the client need not wait for one call's reply before sending
//! the next. Alone, a request is one call as before. A request the shared call did not answer
//! for (`None`) goes back to its caller, who then makes the call alone with its own error
//! handling and fallbacks.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The most concurrent requests of one key that share one call, unless configured.
pub const DEFAULT_COALESCE: usize = 64;

/// Where one waiting request's reply goes (`None`: go alone).
type Slot<Resp> = oneshot::Sender<Option<Resp>>;

/// The requests of one key waiting for the next shared call, and how many tasks serve them.
struct Queue<Req, Resp> {
    waiting: Vec<(Req, Slot<Resp>)>,
    running: usize,
}

impl<Req, Resp> Default for Queue<Req, Resp> {
    fn default() -> Self {
        Self { waiting: Vec::new(), running: 0 }
    }
}

struct Shared<K, Req, Resp> {
    max: AtomicUsize,
    /// Shared calls made so far (a request served per call: requests / calls).
    calls: AtomicU64,
    queues: Mutex<HashMap<K, Queue<Req, Resp>>>,
}

/// Batches concurrent requests per key `K` into shared calls: cheap to clone (the clones
/// share the queues).
pub(crate) struct Coalescer<K, Req, Resp> {
    shared: Arc<Shared<K, Req, Resp>>,
}

impl<K, Req, Resp> Clone for Coalescer<K, Req, Resp> {
    fn clone(&self) -> Self {
        Self { shared: self.shared.clone() }
    }
}

impl<K, Req, Resp> Coalescer<K, Req, Resp>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    /// A coalescer sharing calls among up to [`DEFAULT_COALESCE`] requests.
    pub(crate) fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                max: AtomicUsize::new(DEFAULT_COALESCE),
                calls: AtomicU64::new(0),
                queues: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sets how many requests of one key may share a call (at least 1; 1: none shares).
    pub(crate) fn set_max(&self, max: usize) {
        self.shared.max.store(max.max(1), Ordering::Relaxed);
    }

    /// Whether calls are shared at all (more than one request per call).
    pub(crate) fn is_on(&self) -> bool {
        self.shared.max.load(Ordering::Relaxed) > 1
    }

    /// Shared calls made so far.
    pub(crate) fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// How many keys have a queue now: only keys with requests waiting or a call in
    /// flight (an idle key's queue is removed), so names sent from outside cannot grow it.
    pub(crate) fn keys(&self) -> usize {
        self.shared.queues.lock().expect("coalescer queue lock").len()
    }

    /// Queues `req` for the next shared call of `key` and waits for its reply; `None` when
    /// that call did not answer for it. A request that finds fewer than `lanes` tasks
    /// serving the key (at least one) starts one, serving the key's queue with `flush`, a
    /// call at a time, until none wait. `flush` gets the requests in arrival order and
    /// answers them in the same order; missing answers are `None`, answers beyond the
    /// requests are dropped.
    pub(crate) async fn submit<F, Fut>(&self, key: &K, lanes: usize, req: Req, flush: F) -> Option<Resp>
    where
        F: Fn(K, Vec<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Option<Resp>>> + Send,
    {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.shared.queues.lock().expect("coalescer queue lock");
            // The key's queue exists after its first request: no key cloned per request.
            let queue = match queues.get_mut(key) {
                Some(queue) => queue,
                None => queues.entry(key.clone()).or_default(),
            };
            queue.waiting.push((req, tx));
            let start = queue.running < lanes.max(1);
            if start {
                queue.running += 1;
            }
            start
        };
        if start {
            // Made before the task: a task dropped before it ever runs still stops counting.
            let serving = Serving { shared: self.shared.clone(), key: key.clone(), counted: true };
            tokio::spawn(async move { serve(serving, flush).await });
        }
        rx.await.ok().flatten()
    }
}

/// One task serving a key's queue. Whatever happens to it (a panic, a cancelled runtime, a
/// task never run), no request is left waiting for it: on the way out it no longer counts
/// as serving, and when no task serves the key any more the slots left are dropped (their
/// requests go alone).
struct Serving<K: Eq + Hash, Req, Resp> {
    shared: Arc<Shared<K, Req, Resp>>,
    key: K,
    counted: bool,
}

impl<K: Eq + Hash, Req, Resp> Drop for Serving<K, Req, Resp> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        if let Ok(mut queues) = self.shared.queues.lock() {
            if let Some(queue) = queues.get_mut(&self.key) {
                queue.running = queue.running.saturating_sub(1);
                if queue.running == 0 {
                    // No task serves the key: the slots left are dropped (their requests
                    // go alone) and the idle queue goes.
                    queues.remove(&self.key);
                }
            }
        }
    }
}

/// Serves the key's waiting requests, a shared call at a time, until none wait.
async fn serve<K, Req, Resp, F, Fut>(mut serving: Serving<K, Req, Resp>, flush: F)
where
    K: Eq + Hash + Clone,
    F: Fn(K, Vec<Req>) -> Fut,
    Fut: Future<Output = Vec<Option<Resp>>>,
{
    loop {
        let shared = serving.shared.clone();
        let max = shared.max.load(Ordering::Relaxed);
        let (reqs, slots): (Vec<Req>, Vec<Slot<Resp>>) = {
            let mut queues = shared.queues.lock().expect("coalescer queue lock");
            let queue = queues.entry(serving.key.clone()).or_default();
            // A caller that gave up is not served: nothing is done for nobody.
            queue.waiting.retain(|(_, slot)| !slot.is_closed());
            if queue.waiting.is_empty() {
                queue.running = queue.running.saturating_sub(1);
                if queue.running == 0 {
                    // Idle: the key's queue goes, so the map holds only keys in use.
                    queues.remove(&serving.key);
                }
                serving.counted = false;
                return;
            }
            let n = queue.waiting.len().min(max);
            queue.waiting.drain(..n).unzip()
        };
        shared.calls.fetch_add(1, Ordering::Relaxed);
        let mut replies = flush(serving.key.clone(), reqs).await;
        replies.resize_with(slots.len(), || None);
        for (slot, reply) in slots.into_iter().zip(replies) {
            let _ = slot.send(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lone_request_is_one_call_and_hears_its_own_reply() {
        let c: Coalescer<&'static str, u32, u32> = Coalescer::new();
        let double =
            |_: &'static str, reqs: Vec<u32>| async move { reqs.into_iter().map(|r| Some(r * 2)).collect::<Vec<_>>() };
        let got = c.submit(&"k", 1, 7, double);
        assert_eq!(got.await, Some(14));
    }

    #[tokio::test]
    async fn requests_without_an_answer_hear_none() {
        let c: Coalescer<&'static str, u32, u32> = Coalescer::new();
        let got = c.submit(&"k", 1, 7, |_, _reqs: Vec<u32>| async move { Vec::new() }).await;
        assert_eq!(got, None);
    }

    #[tokio::test]
    async fn requests_that_arrive_during_a_call_share_the_next_one() {
        let c: Coalescer<&'static str, u32, usize> = Coalescer::new();
        let (release, gate) = tokio::sync::watch::channel(false);
        let (entered, mut calls) = tokio::sync::mpsc::unbounded_channel();
        // Each answer is the size of the call that served the request.
        let flush = move |_: &'static str, reqs: Vec<u32>| {
            let (mut gate, entered) = (gate.clone(), entered.clone());
            async move {
                let _ = entered.send(reqs.len());
                let _ = gate.wait_for(|open| *open).await;
                vec![Some(reqs.len()); reqs.len()]
            }
        };
        let first = tokio::spawn({
            let (c, flush) = (c.clone(), flush.clone());
            async move { c.submit(&"k", 1, 0, flush).await }
        });
        assert_eq!(calls.recv().await, Some(1), "the first call is in flight");
        let rest: Vec<_> = (1..=3)
            .map(|i| {
                let (c, flush) = (c.clone(), flush.clone());
                tokio::spawn(async move { c.submit(&"k", 1, i, flush).await })
            })
            .collect();
        while c.shared.queues.lock().unwrap()["k"].waiting.len() < 3 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap(), Some(1));
        for r in rest {
            assert_eq!(r.await.unwrap(), Some(3));
        }
        assert_eq!(calls.recv().await, Some(3), "one call for the three that waited");
    }

    #[tokio::test]
    async fn with_two_lanes_a_second_call_goes_while_the_first_is_in_flight_and_every_request_is_answered() {
        let c: Coalescer<&'static str, u32, u32> = Coalescer::new();
        let (release, gate) = tokio::sync::watch::channel(false);
        let (entered, mut calls) = tokio::sync::mpsc::unbounded_channel();
        let flush = move |_: &'static str, reqs: Vec<u32>| {
            let (mut gate, entered) = (gate.clone(), entered.clone());
            async move {
                let _ = entered.send(reqs.clone());
                let _ = gate.wait_for(|open| *open).await;
                reqs.into_iter().map(|r| Some(r * 10)).collect::<Vec<_>>()
            }
        };
        let submit = |i: u32| {
            let (c, flush) = (c.clone(), flush.clone());
            tokio::spawn(async move { c.submit(&"k", 2, i, flush).await })
        };
        let first = submit(1);
        assert_eq!(calls.recv().await, Some(vec![1]), "the first call is in flight");
        let second = submit(2);
        assert_eq!(calls.recv().await, Some(vec![2]), "a second call goes before the first answers");
        let rest: Vec<_> = (3..=5).map(submit).collect();
        while c.shared.queues.lock().unwrap()["k"].waiting.len() < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(c.shared.queues.lock().unwrap()["k"].running, 2, "no third lane");
        release.send(true).unwrap();
        assert_eq!((first.await.unwrap(), second.await.unwrap()), (Some(10), Some(20)));
        for (i, r) in (3..=5).zip(rest) {
            assert_eq!(r.await.unwrap(), Some(i * 10), "each request hears its own answer");
        }
        assert_eq!(calls.recv().await, Some(vec![3, 4, 5]), "those that waited share the next call");
        while c.keys() > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(c.calls(), 3);
    }

    #[tokio::test]
    async fn an_idle_key_keeps_no_queue() {
        let c: Coalescer<String, u32, u32> = Coalescer::new();
        let echo = |_: String, reqs: Vec<u32>| async move { reqs.into_iter().map(Some).collect::<Vec<_>>() };
        for i in 0..1_000u32 {
            assert_eq!(c.submit(&format!("name-{i}"), 1, i, echo).await, Some(i));
        }
        // Each serving task removes its key's queue on its way out, after the reply.
        let started = std::time::Instant::now();
        while c.keys() > 0 && started.elapsed() < std::time::Duration::from_secs(5) {
            tokio::task::yield_now().await;
        }
        assert_eq!(c.keys(), 0, "1,000 names, each served once, leave no queue behind");
        // A key used again gets a queue again.
        assert_eq!(c.submit(&"name-1".to_owned(), 1, 7, echo).await, Some(7));
    }
}
