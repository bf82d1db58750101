-- settle_quota.lua: closes a reservation with the tokens actually used.
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] request id   ARGV[5] actual tokens (0..2^53-1)   ARGV[6] "1" for a stream that
--         broke part-way (what was consumed is charged, as for any settle), else "0"
-- Several requests may come in one call (see the end of the script): each is settled in
-- turn exactly as alone.
-- Returns one of:
--   {"settled", version, reserved, actual, overdraft, charged, late 0|1, plans,
--    reserved_at, at, gen, model, parts, deadline}
--       charged "bucket:amount,..."; overdraft: actual beyond the reservation; late = 1
--       when the reservation had expired (swept) or is not known within a reservation's TTL
--       of a restore (lost with a Redis that restarted empty: reserved 0) and the use is
--       charged now; plans "period:amount,..."
--       the plan charges per period; reserved_at, at (ms), gen, model ('' unknown), parts
--       and deadline (the reservation's; '' when none) as in the usage record
--   {"already_settled", version, reserved, actual, charged}
--   {"already_released", version, reserved}
--   {"unknown"} (no reservation, and the counters were not restored lately)
--   {"unknown_tenant"}   {"period", actual_period}
-- Guarantees: the reservation's buckets pay the actual use in their order (a grant that
-- expired since the reservation still pays what it reserved); use beyond the reservation
-- is charged to live buckets, then the plan, which may go negative; the difference is
-- refunded. A repeated settle changes nothing. Every settle that charges appends its
-- record to the usage stream (KEYS[7]) in this same script.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
if not meta then return {'unknown_tenant'} end

-- The counters a settle of this month's or last month's reservation reads, in one read per
-- hash for the whole call.
prefetch_state({'r:plan:' .. ARGV[1], 'r:plan:' .. ARGV[2]})
prefetch(KEYS[5], {'plan_used'})

-- One request: its reply.
local function settle_one(rid, actual_arg)
  local actual = tonumber(actual_arg)
  local open = redis.call('HGET', KEYS[3], rid)
  if open then
    local entry = decode_entry(open)
    local charged, excess, r = finish(meta, rid, entry, actual, 'settled')
    return {'settled', meta.version, entry.amount, actual, excess, charged, 0, r[1], r[2], r[3], r[4], r[5], r[6],
      r[7]}
  end
  local done = find_done(rid, meta)
  if not done then
    -- No reservation and no trace of one. Within a reservation's TTL after the counters
    -- were restored (Redis lost them, with the open reservations), it is one the loss took:
    -- the use happened, so it is charged now, as a late settle of nothing reserved.
    -- Otherwise it was never reserved here: unknown, nothing charged.
    local restored_at = tonumber(redis.call('HGET', KEYS[2], 'restored_at') or '0')
    if restored_at == 0 or NOW - restored_at > meta.reservation_ttl_ms then return {'unknown'} end
    local plans = {}
    local charged = encode_parts(charge_now(meta, actual, plans))
    write_done(meta, rid, 'settled', 0, NOW, '', actual, charged)
    touch_period(meta)
    local r = record_usage(rid, 'settled', true, 0, actual, charged, plans, NOW)
    return {'settled', meta.version, 0, actual, actual, charged, 1, r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
  end
  if done.state == 'settled' then
    return {'already_settled', meta.version, done.amount, done.actual, done.charged}
  end
  if done.state == 'expired' then
    -- Swept before the caller settled: the use happened, so it is charged now.
    return settle_after_expiry(meta, rid, done, actual)
  end
  return {'already_released', meta.version, done.amount}
end

-- ARGV[4..] holds one request (3 values) or several in turn (the client coalesces
-- concurrent calls for one tenant): one reply for one request, else {"batch", {reply, ...}}
-- with a reply per request, in order.
local groups = math.floor((#ARGV - 3) / 3)
if groups <= 1 then return settle_one(ARGV[4], ARGV[5]) end
local replies = {}
for i = 0, groups - 1 do
  replies[#replies + 1] = settle_one(ARGV[4 + 3 * i], ARGV[5 + 3 * i])
end
return {'batch', replies}
