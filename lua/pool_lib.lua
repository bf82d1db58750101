-- pool_lib.lua: shared by draw_ticket.lua and count_draw.lua; the client prepends it to
-- their bodies (each stays one self-contained EVALSHA). Touches only keys it is given.

-- Reads what a draw needs from the state hash in one call: the published version, the
-- low-water mark, whether any cap or ejection applies (publish_pool.lua, set_ejected.lua)
-- and the pool-local days (the rotation job). nil when the pool was never published.
-- `wlen`: the short cap window's length in ms when the pool has window caps (nil
-- otherwise); `drawlog`: whether draws are appended to the pool's draw log.
local function pool_state(state_key)
  local s = redis.call('HMGET', state_key, 'version', 'low_water', 'capped', 'ejected',
    'day0', 'day0_end', 'day1', 'day1_end', 'kind', 'rebuilds', 'wlen', 'drawlog')
  if not s[1] then return nil end
  local wlen = tonumber(s[11] or '0')
  if wlen <= 0 then wlen = nil end
  return {
    version = tonumber(s[1]), low_water = tonumber(s[2]), capped = s[3] == '1' or wlen ~= nil,
    ejected = s[4] ~= false and s[4] ~= '0',
    day0 = s[5], day0_end = tonumber(s[6]), day1 = s[7], day1_end = tonumber(s[8]),
    tiers = s[9] == 'tiers', rebuilds = s[10] or '0', wlen = wlen, drawlog = s[12] == '1',
  }
end

-- The tier that serves a request that drew `drawn`, given which tiers can serve
-- (`avail.G`, `avail.N`, `avail.U`); nil when none can. Mirrors engine::tier::fallback:
-- the drawn tier; else the only available one; else its partner (G→N, N→G, U→G); else
-- the first available in the order G, N, U.
local function tier_fallback(drawn, avail)
  if avail[drawn] then return drawn end
  local only, n = nil, 0
  for _, t in ipairs({'G', 'N', 'U'}) do
    if avail[t] then n = n + 1; only = t end
  end
  if n == 0 then return nil end
  if n == 1 then return only end
  local partner = ({G = 'N', N = 'G', U = 'G'})[drawn]
  if partner and avail[partner] then return partner end
  for _, t in ipairs({'G', 'N', 'U'}) do
    if avail[t] then return t end
  end
  return nil
end

-- Now in ms: ARGV[3] when the caller set the time by hand, else Redis TIME (the one clock).
local function pool_now()
  if ARGV[3] ~= '' then return tonumber(ARGV[3]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The pool-local day holding `now`, as the hits key the caller passed for it (key0 for
-- ARGV[1]'s day, key1 for ARGV[2]'s). Returns hits_key, day_end — or nil and the reply to
-- give: {"no_day"} when no current day is written, {"day", day0, day1} when the caller
-- passed keys for other days.
local function pool_day(st, key0, key1, now)
  local day, day_end
  if st.day0 and now < st.day0_end then
    day, day_end = st.day0, st.day0_end
  elseif st.day1 and now < st.day1_end then
    day, day_end = st.day1, st.day1_end
  else
    return nil, {'no_day'}
  end
  if day == ARGV[1] then return key0, day_end end
  if day == ARGV[2] then return key1, day_end end
  return nil, {'day', st.day0 or '', st.day1 or ''}
end

-- The short cap window holding `now` (a pool with window caps), as the key the caller
-- passed for it: key0 for the window starting at ARGV[w0_arg], key1 for ARGV[w0_arg + 1].
-- Returns window_key, window_end — or nil when the pool has no window caps — or false and
-- the reply to give, {"window", start, length}, when the caller passed keys for other
-- windows (it retries with these). Windows are aligned to the epoch.
local function pool_window(st, key0, key1, now, w0_arg)
  if not st.wlen then return nil end
  local start = now - (now % st.wlen)
  local text = string.format('%.0f', start)
  if text == ARGV[w0_arg] then return key0, start + st.wlen end
  if text == ARGV[w0_arg + 1] then return key1, start + st.wlen end
  return false, {'window', text, string.format('%.0f', st.wlen)}
end

-- Makes a window's hash expire one window after the window ends. A window's hash is named
-- by its start only, so after the pool's window grows, the longer window goes on counting
-- in the hash a shorter one began (its draws are in the longer window too): the expiry is
-- pushed out to the longer window's end (`GT`), never brought in.
local function keep_window(whits, window_end, wlen)
  local expires = string.format('%.0f', window_end + wlen)
  if redis.call('PEXPIREAT', whits, expires, 'GT') == 0 and redis.call('PTTL', whits) == -1 then
    redis.call('PEXPIREAT', whits, expires)
  end
end

-- Counts one draw of `member` in the day's hits (the day's hash expires 48 h after the
-- day) and, with window caps, in the window's.
local function count_hit(hits, member, day_end, whits, window_end, wlen)
  if redis.call('HINCRBY', hits, member, 1) == 1 then
    redis.call('PEXPIREAT', hits, string.format('%.0f', day_end + 48 * 3600 * 1000))
  end
  if whits then
    redis.call('HINCRBY', whits, member, 1)
    keep_window(whits, window_end, wlen)
  end
end

-- Whether `member` reached its daily cap (meta field cap:<member>) in `hits`, or its
-- window cap (meta field wcap:<member>) in `whits` (whose expiry is then kept too: a
-- window grown longer may count nothing new while its members are at their caps).
local function at_cap(meta_key, hits, member, whits, window_end, wlen)
  local caps = redis.call('HMGET', meta_key, 'cap:' .. member, 'wcap:' .. member)
  if caps[1] and tonumber(redis.call('HGET', hits, member) or '0') >= tonumber(caps[1]) then return true end
  if whits and caps[2] and tonumber(redis.call('HGET', whits, member) or '0') >= tonumber(caps[2]) then
    keep_window(whits, window_end, wlen)
    return true
  end
  return false
end

-- Appends the draws of one call to the pool's draw log (a stream the control plane drains
-- into Postgres): one entry, `t` the time of the draws (ms), `m` the members in order.
local function log_draws(log_key, st, now, members)
  if not st.drawlog or #members == 0 then return end
  redis.call('XADD', log_key, 'MAXLEN', '~', '200000', '*', 't', string.format('%.0f', now),
    'm', table.concat(members, ','))
end
