-- release_quota.lua: cancels a reservation (the request failed before using anything).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] request id
-- Returns one of:
--   {"released", version, reserved}   (its record appended to the usage stream)
--   {"already_released", version, reserved}   (also after the sweeper expired it)
--   {"already_settled", version, reserved, actual, charged}
--   {"unknown"}   {"unknown_tenant"}   {"period", actual_period}
-- Guarantees: the whole reservation is refunded once; a repeated release changes nothing.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local meta = read_meta()
if not meta then return {'unknown_tenant'} end
local rid = ARGV[4]

local open = redis.call('HGET', KEYS[3], rid)
if open then
  local entry = decode_entry(open)
  finish(meta, rid, entry, nil, 'released')
  return {'released', meta.version, entry.amount}
end
local done = find_done(rid, meta)
if not done then return {'unknown'} end
if done.state == 'settled' then
  return {'already_settled', meta.version, done.amount, done.actual, done.charged}
end
return {'already_released', meta.version, done.amount}
