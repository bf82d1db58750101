-- The publisher retries a failed delivery with backoff (2 s, 4 s, 8 s … at most 30 s)
-- instead of on every run, so a Redis outage does not cost every run a timeout per entity.
-- Reconcile (every 2 s) still republishes anything stale the moment Redis answers again.
alter table outbox add column next_attempt_at timestamptz;
