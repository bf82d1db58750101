-- sweep_quota.lua: releases a tenant's reservations whose deadline has passed.
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] the most reservations to release in this call
-- Returns {released, tokens, left, open, chunks, chunk_tokens} — how many were released,
-- the tokens they held, how many expired ones are still waiting (more than the limit), how
-- many reservations stay open, and the chunks returned after their deadline (their holder
-- died or stopped using them: chunk_lib.lua) or that can serve no reservation any more,
-- with the tokens they held; or
-- {"period", actual}.
-- Guarantees: only reservations with deadline <= now (Redis TIME) are touched; each is
-- refunded as by release_quota and marked "expired" (its record appended to the usage
-- stream), so a late settle still charges.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
local limit = tonumber(ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', fmt(NOW), 'LIMIT', 0, limit)
local released, tokens = 0, 0
for _, rid in ipairs(due) do
  local open = redis.call('HGET', KEYS[3], rid)
  if open then
    -- Also for a tenant no longer published: its reserved amounts are returned all the same.
    local entry = decode_entry(open)
    finish(meta, rid, entry, nil, 'expired')
    released = released + 1
    tokens = tokens + entry.amount
  else
    -- A lease without its ledger entry: drop it.
    lease_remove(rid)
  end
end
local left = redis.call('ZCOUNT', KEYS[4], '-inf', fmt(NOW))
local chunks, chunk_tokens = reclaim_expired(meta)
return {released, tokens, left, redis.call('ZCARD', KEYS[4]), chunks, chunk_tokens}
