-- pool_lib.lua: shared by draw_ticket.lua and count_draw.lua; the client prepends it to
-- their bodies (each stays one self-contained EVALSHA). Touches only keys it is given.

-- Now in ms: ARGV[3] when the caller set the time by hand, else Redis TIME (the one clock).
local function pool_now()
  if ARGV[3] ~= '' then return tonumber(ARGV[3]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The pool-local day holding `now`, from the state hash the rotation job writes
-- (day0/day0_end, day1/day1_end), as the hits key the caller passed for it (key0 for
-- ARGV[1]'s day, key1 for ARGV[2]'s). Returns hits_key, day_end — or nil and the reply to
-- give: {"no_day"} when no current day is written, {"day", day0, day1} when the caller
-- passed keys for other days.
local function pool_day(state_key, key0, key1, now)
  local days = redis.call('HMGET', state_key, 'day0', 'day0_end', 'day1', 'day1_end')
  local day, day_end
  if days[1] and now < tonumber(days[2]) then
    day, day_end = days[1], tonumber(days[2])
  elseif days[3] and now < tonumber(days[4]) then
    day, day_end = days[3], tonumber(days[4])
  else
    return nil, {'no_day'}
  end
  if day == ARGV[1] then return key0, day_end end
  if day == ARGV[2] then return key1, day_end end
  return nil, {'day', days[1] or '', days[3] or ''}
end

-- Counts one draw of `member` in the day's hits; the day's hash expires 48 h after the day.
local function count_hit(hits, member, day_end)
  if redis.call('HINCRBY', hits, member, 1) == 1 then
    redis.call('PEXPIREAT', hits, string.format('%.0f', day_end + 48 * 3600 * 1000))
  end
end

-- Whether `member` reached its daily cap (meta field cap:<member>) in `hits`.
local function at_cap(meta_key, hits, member)
  local cap = redis.call('HGET', meta_key, 'cap:' .. member)
  return cap ~= false and cap ~= nil and tonumber(redis.call('HGET', hits, member) or '0') >= tonumber(cap)
end
