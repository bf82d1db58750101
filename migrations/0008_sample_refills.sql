-- Refills per pool for the dashboard: the sampler records the pool's batch counter (the
-- refill script's sequence numbers in the pool's state hash, summed over its lists: the
-- main list and, in a `tiers` pool, each tier's), so refills per minute are the counter's
-- increase between samples. Every batch added counts: refills below low-water, standby
-- batches built ahead, and rebuilds after a change. Null in samples taken before this
-- column existed, or when Redis held no counter for the pool.
alter table pool_sample add column batches bigint check (batches is null or batches >= 0);
