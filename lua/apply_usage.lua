-- apply_usage.lua: charges a usage-ledger row that this Redis's counters may not hold
-- (written to Postgres after the Redis that counted it lost it: from an instance's own
-- records, or from a stream drained across a restart).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] the ledger row id   ARGV[5] the generation the record was counted in
-- ARGV[6] charged grant parts "grant:amount,..." (the plan is in ARGV[7])
-- ARGV[7] plan charges "period:amount,..."   ARGV[8] the reservation's day "YYYY-MM-DD",
-- or "" when its request is not to be counted again
-- ARGV[9] the request id   ARGV[10] "1" when the record is the settling instance's own copy
-- ARGV[11] when the record was counted (ms since the epoch)
-- Returns {"missing"} when the counters are not restored yet (the restore reads the
-- ledger, which holds this row), {"counted"} when they already hold it, {"applied"}.
-- Guarantees: a row is charged at most once, and only when this copy of the counters
-- cannot hold it: counted in another generation and not included by the restore.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local gen = redis.call('HGET', KEYS[2], 'gen')
if not gen then return {'missing'} end
local meta = read_meta()
-- The counters hold a settle whose done marker is here and was written with them (the same
-- generation; a marker of the month's hash went with its counters). A marker that outlived
-- its counters (they were lost and rebuilt, the marker was not) proves nothing.
if ARGV[9] ~= '' then
  local done = find_done(ARGV[9], meta)
  if done and (done.gen == nil or done.gen == gen) then return {'counted'} end
end
if gen == ARGV[5] then
  if ARGV[10] ~= '1' then return {'counted'} end
  -- An instance's own record of this generation is proven only by its done marker, which
  -- lives at least the idempotency window after the settle (the shorter window while W
  -- changes; an old marker, a key of its own: done_days): a record that old was counted
  -- by this copy of the counters long ago (charging it again would charge it twice; a
  -- record the counters did lose is put right by the daily compensation from the ledger).
  local life = marker_life(meta)
  local legacy = hnum(KEYS[2], 'legacy_until')
  if legacy == 0 or legacy > NOW then life = math.max(life, done_days(meta) * 86400000) end
  if ARGV[11] ~= '' and NOW - tonumber(ARGV[11]) >= life then return {'counted'} end
end
-- Records counted before the counters were adopted (no generation then) are theirs.
if ARGV[5] == '' and redis.call('HGET', KEYS[2], 'adopted') == '1' then return {'counted'} end
local upto = tonumber(redis.call('HGET', KEYS[2], 'restored_upto') or '0')
if tonumber(ARGV[4]) <= upto then return {'counted'} end
if redis.call('HSETNX', KEYS[2], 'applied:' .. ARGV[4], '1') == 0 then return {'counted'} end
for _, p in ipairs(decode_parts(ARGV[6])) do
  if p[1] ~= 'plan' then charge(p[1], PERIOD, p[2]) end
end
local previous = false
for period, amount in string.gmatch(ARGV[7], '([^:,]+):(%d+)') do
  charge('plan', period, tonumber(amount))
  if period == ARGV[2] then previous = true end
end
if previous then touch_previous(meta) end
if ARGV[8] ~= '' and string.sub(ARGV[8], 1, 7) == ARGV[1] then
  hincr(KEYS[5], 'req:' .. ARGV[8], 1)
end
if meta then touch_period(meta) end
return {'applied'}
