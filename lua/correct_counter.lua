-- correct_counter.lua: moves one use counter of a tenant by a delta, only if it still holds
-- the value the compensation measured (so a settle in between is never undone).
-- A function of the quota library, after quota_lib.lua (KEYS[1..8], ARGV[1..3] there).
-- ARGV[4] "plan" (the current period's plan use) or a grant id   ARGV[5] the value measured
-- ARGV[6] the delta (may be negative)
-- Returns {"corrected", new_value} or {"changed", current_value}; or {"period", actual}.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local key, field = KEYS[2], 'u:' .. ARGV[4]
if ARGV[4] == 'plan' then key, field = KEYS[5], 'plan_used' end
local current = hnum(key, field)
if current ~= tonumber(ARGV[5]) then return {'changed', fmt(current)} end
local new = hincr(key, field, tonumber(ARGV[6]))
local meta = read_meta()
if meta then touch_period(meta) end
return {'corrected', fmt(new)}
