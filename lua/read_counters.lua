-- read_counters.lua: a tenant's use counters and its usage stream's undrained tail, read in
-- one step, for the compensation to compare with the usage ledger (read only).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] the most stream entries to read (more: {"busy", length})
-- Returns {now_ms, plan_used, {grant, used, ...}, tail_plan, {grant, tail, ...}, {rid, ...},
--          adopted "1"|"0"}
--   plan_used: the current period's; tail_plan and the tail's grant amounts: what the
--   stream's records charged (the plan: in the current period), which the ledger does not
--   hold yet; rids: those records' request ids; adopted: the counters predate the ledger
--   (it has no opening balance for them). Or {"period", actual}.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local length = redis.call('XLEN', KEYS[7])
if length > tonumber(ARGV[4]) then return {'busy', length} end
local grants = {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
  if string.sub(flat[i], 1, 2) == 'u:' then
    grants[#grants + 1] = string.sub(flat[i], 3)
    grants[#grants + 1] = flat[i + 1]
  end
end
local tail_plan = 0
local tail = {}
local rids = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[7], '-', '+')) do
  local m = {}
  for i = 1, #e[2], 2 do m[e[2][i]] = e[2][i + 1] end
  rids[#rids + 1] = m.rid or ''
  for period, amount in string.gmatch(m.plans or '', '([^:,]+):(%d+)') do
    if period == PERIOD then tail_plan = tail_plan + tonumber(amount) end
  end
  for _, p in ipairs(decode_parts(m.charged or '')) do
    if p[1] ~= 'plan' then tail[p[1]] = (tail[p[1]] or 0) + p[2] end
  end
end
local tail_flat = {}
for g, n in pairs(tail) do
  tail_flat[#tail_flat + 1] = g
  tail_flat[#tail_flat + 1] = fmt(n)
end
return {fmt(NOW), fmt(hnum(KEYS[5], 'plan_used')), grants, fmt(tail_plan), tail_flat, rids,
  redis.call('HGET', KEYS[2], 'adopted') or '0'}
