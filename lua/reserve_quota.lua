-- reserve_quota.lua: admits one request against a tenant's quota, in one atomic step.
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] request id   ARGV[5] tokens (1..2^53-1)   ARGV[6] "1" to admit regardless of the
--         limits (replaying an admission made while Redis was unreachable), else "0"
-- ARGV[7] the model the request is for ('' when not known), kept with the reservation for
--         the usage record
-- ARGV[8] '' or "holder|want|lease_ms": serve the request from the chunk `holder` holds
--         (chunk_lib.lua), taking one of about `want` tokens for `lease_ms` when it holds
--         none that serves; KEYS[9] the chunks
-- Several requests may come in one call (see the end of the script): each is admitted in
-- turn exactly as alone.
-- Returns one of:
--   {"reserved", version, amount, deadline_ms, parts, replayed 0|1, state, chunk_left}
--       parts "bucket:amount,..." in paying order; state "open", or for a replay of a
--       finished reservation "settled" | "released" | "expired"; chunk_left: what the
--       holder's chunk holds after this request (-1: it holds none; '' when the request
--       did not look: no ARGV[8], a replay, a forced admission)
--   {"refused", version, dimension, available, limit, chunk_left}  dimension "tokens" |
--       "requests" | "concurrency"; available: what is left of it now; limit: the
--       configured limit; chunk_left as above ('' for requests and concurrency)
--   {"unknown_tenant"}   {"period", actual_period}
-- Guarantees: tokens, the day's request count and a concurrency lease are taken together
-- or not at all; a request id reserves at most once (a retry returns the first result).
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
if not meta then return {'unknown_tenant'} end

-- The counters every admission reads, in one read per hash for the whole call.
local counters = {'r:plan:' .. PERIOD}
if #meta.grants <= 200 then
  for _, g in ipairs(meta.grants) do
    counters[#counters + 1] = 'u:' .. g.id
    counters[#counters + 1] = 'r:' .. g.id
  end
end
prefetch_state(counters)
prefetch(KEYS[5], {'req:' .. DAY, 'plan_used'})

-- Opens request `rid`'s reservation of `tokens` held by `encoded` parts: its ledger entry,
-- its concurrency lease and its day's count; the reply (chunk_left as below).
local function admit(rid, tokens, deadline, encoded, model, chunk_left)
  redis.call('HSET', KEYS[3], rid, table.concat({PERIOD, fmt(tokens), fmt(deadline), encoded, model or ''}, '|'))
  lease_add(rid, deadline)
  hincr(KEYS[5], 'req:' .. DAY, 1)
  touch_period(meta)
  return {'reserved', meta.version, tokens, deadline, encoded, 0, 'open', chunk_left}
end

-- One request: its reply.
local function reserve_one(rid, tokens_arg, force_arg, model, chunk_arg)
  local tokens = tonumber(tokens_arg)
  local force = force_arg == '1'
  local spec = chunk_spec(chunk_arg)
  local chunk_left = ''
  local open = redis.call('HGET', KEYS[3], rid)
  if open then
    local e = decode_entry(open)
    return {'reserved', meta.version, e.amount, e.deadline, e.parts, 1, 'open', chunk_left}
  end
  local done = find_done(rid, meta)
  if done then
    return {'reserved', meta.version, done.amount, done.deadline, done.parts, 1, done.state, chunk_left}
  end

  local requests = hnum(KEYS[5], 'req:' .. DAY)
  if not force and requests >= meta.daily_requests then
    return {'refused', meta.version, 'requests', 0, meta.daily_requests}
  end
  local leases = lease_count()
  if not force and leases >= meta.concurrency then
    return {'refused', meta.version, 'concurrency', 0, meta.concurrency}
  end
  local deadline = NOW + meta.reservation_ttl_ms
  if spec and not force then
    local c = chunk_for(spec, meta, tokens)
    if c then
      chunk_spend(spec.holder, c, tokens)
      return admit(rid, tokens, deadline, c.bucket .. ':' .. fmt(tokens), model, c.left)
    end
    chunk_left = -1
  end
  local buckets = live_buckets(meta)
  local free = available(buckets)
  if not force and free < tokens and reclaim_expired(meta) > 0 then
    -- Chunks whose holders died held some of it.
    buckets = live_buckets(meta)
    free = available(buckets)
  end
  if not force and free < tokens then
    return {'refused', meta.version, 'tokens', free, token_limit(meta, buckets), chunk_left}
  end

  local parts, rest = take(buckets, tokens)
  -- Only a forced admission can have a rest: the plan reserves it, into an overdraft.
  if rest > 0 then add_part(parts, 'plan', rest) end
  for _, p in ipairs(parts) do
    hincr(KEYS[2], reserved_field(p[1], PERIOD), p[2])
  end
  return admit(rid, tokens, deadline, encode_parts(parts), model, chunk_left)
end

-- ARGV[4..] holds one request (5 values) or several in turn (the client coalesces
-- concurrent calls for one tenant): one reply for one request, else {"batch", {reply, ...}}
-- with a reply per request, in order.
local groups = math.floor((#ARGV - 3) / 5)
if groups <= 1 then return reserve_one(ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]) end
local replies = {}
for i = 0, groups - 1 do
  local a = 4 + 5 * i
  replies[#replies + 1] = reserve_one(ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
end
return {'batch', replies}
