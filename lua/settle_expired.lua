-- settle_expired.lua: settles a request whose reservation the sweeper returned longer ago
-- than the tenant's idempotency window: Redis no longer holds its done marker, the usage
-- ledger holds its expiry. The use happened, so it is charged now, late, exactly as a
-- settle after the sweep within the window is (settle_quota.lua).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] request id   ARGV[5] actual tokens (0..2^53-1)   ARGV[6] the reservation's tokens
-- ARGV[7] its deadline (ms since the epoch)   ARGV[8] its parts "bucket:amount,..."
-- Returns settle_quota.lua's "settled" reply; {"known"} when Redis holds the request id
-- (an open reservation or a done marker: the caller settles it as usual, which answers
-- from it); {"unknown_tenant"}; {"period", actual_period}.
-- Guarantees: charged at most once: the done marker it writes answers any settle after it.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
if not meta then return {'unknown_tenant'} end
local rid = ARGV[4]
if redis.call('HEXISTS', KEYS[3], rid) == 1 or find_done(rid, meta) then return {'known'} end
return settle_after_expiry(meta, rid, {amount = tonumber(ARGV[6]), deadline = tonumber(ARGV[7]), parts = ARGV[8]},
  tonumber(ARGV[5]))
