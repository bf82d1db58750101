-- read_quota.lua: a tenant's quota as it stands now (read only).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- Returns {"quota", version, period, day, requests_today, daily_requests, leases,
--          concurrency, available, buckets} where buckets is a list of
--   {id, kind, priority, amount, used, reserved, live 0|1, expires_at_ms or -1, in_chunks}
-- in paying order (the plan last; in_chunks: of reserved, what instances hold in chunks,
-- chunk_lib.lua); or {"unknown_tenant"} / {"period", actual_period}.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
if not meta then return {'unknown_tenant'} end
-- What chunks hold, per reserved-amount field (only chunks of these counters' generation
-- are counted in them).
local held = {}
local flat = redis.call('HGETALL', KEYS[9])
for i = 2, #flat, 2 do
  local c = decode_chunk(flat[i])
  if c and c.gen == (state_string('gen') or '') then
    local field = reserved_field(c.bucket, c.period)
    held[field] = (held[field] or 0) + c.left
  end
end
local rows = {}
local live = {}
for _, b in ipairs(live_buckets(meta)) do live[b.id] = true end
-- Every grant, live or not, in paying order (as the reply promises), not as published.
local grants = {}
for _, g in ipairs(meta.grants) do
  local expires = g.expires_at_ms
  if expires == cjson.null then expires = nil end
  grants[#grants + 1] = {id = g.id, rank = g.kind == 'bonus' and 0 or 1,
    priority = g.kind == 'bonus' and g.priority or 0, expires = expires, grant = g}
end
table.sort(grants, pays_before)
for _, o in ipairs(grants) do
  local g = o.grant
  rows[#rows + 1] = {g.id, g.kind, g.priority or 0, g.amount, hnum(KEYS[2], 'u:' .. g.id),
    hnum(KEYS[2], 'r:' .. g.id), live[g.id] and 1 or 0, o.expires or -1, held['r:' .. g.id] or 0}
end
rows[#rows + 1] = {'plan', 'plan', 0, meta.monthly_tokens, hnum(KEYS[5], 'plan_used'),
  hnum(KEYS[2], 'r:plan:' .. PERIOD), 1, -1, held['r:plan:' .. PERIOD] or 0}
return {'quota', meta.version, PERIOD, DAY, hnum(KEYS[5], 'req:' .. DAY), meta.daily_requests,
  redis.call('ZCARD', KEYS[4]), meta.concurrency, available(live_buckets(meta)), rows}
