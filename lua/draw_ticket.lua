-- draw_ticket.lua: hands out the next ticket of a pool, in one atomic step.
-- Prepended by pool_lib.lua.
-- KEYS[1] meta     hash  the published snapshot (read here: cap:<member>)
-- KEYS[2] state    hash  runtime: version, low_water, capped, ejected (copies kept by
--                        publish_pool.lua and set_ejected.lua), seq, apportioner, and the
--                        pool-local days day0/day0_end, day1/day1_end (the rotation job)
-- KEYS[3] tickets  list  the tickets, drawn from the left
-- KEYS[4] standby  list  a whole batch built ahead, promoted when the list runs dry
-- KEYS[5] ejected  set   members whose tickets are skipped
-- KEYS[6] hits of ARGV[1]'s day   hash member -> draws that day (expires 48 h after the day)
-- KEYS[7] hits of ARGV[2]'s day
-- KEYS[8] refill   string  the refill flag (set when the list is below low-water)
-- KEYS[9], KEYS[10], KEYS[11]  the lists of tiers G, N, U (a `tiers` pool; unused otherwise)
-- KEYS[12], KEYS[13], KEYS[14] their standby batches, promoted like the pool's
-- ARGV[1], ARGV[2] the two days the caller passed hit keys for ("YYYY-MM-DD")
-- ARGV[3] now in ms, or "" for Redis TIME   ARGV[4] the most tickets skipped per draw
-- ARGV[5] the channel refill requests are published on   ARGV[6] the pool's name
-- ARGV[7] how many draws (1 when absent): the client coalesces concurrent draws of a pool
--         into one call; each is drawn exactly as a single draw would be, in turn
-- KEYS[15], KEYS[16] the window hits of the short cap windows starting at ARGV[8] and
--         ARGV[9] (ms since the epoch, as text; "-" when the caller does not know them):
--         a pool with window caps counts each draw in its window too
-- KEYS[17] the pool's draw log (a stream), appended to when the pool's state says so
-- Returns (for one draw) one of:
--   {"ticket", member, version, from ("list"|"standby"), skipped_ejected, skipped_capped,
--    length_after, refill_flagged 0|1, drawn_tier, serving_tier} (tiers: "" for channels)
--   {"exhausted", version, skipped_ejected, skipped_capped}  (ARGV[4] skips, no tier
--                               with a ticket, or the list ran out on capped tickets:
--                               nothing drawable)
--   {"empty", version}          (no tickets and no standby batch; a refill is flagged)
--   {"day", day0, day1}         (the caller passed keys for other days: retry with these)
--   {"no_day", version}         (the rotation job has not written a current day)
--   {"window", start, length}   (the pool has window caps and the caller passed keys for
--                               other windows: retry with the window starting at `start`)
--   {"unknown_pool"}
-- For ARGV[7] = n > 1: {"batch", {reply, ...}, day, rebuilds} with a ticket reply per draw
-- in order, ending early with the first reply that is not a ticket ("empty" or
-- "exhausted"), the day whose hits counted them and the count of list rebuilds; or, for a
-- `channels` pool with nothing to skip, the compact {"many", ...} of draw_many below; the
-- day, no_day and unknown_pool replies come alone, as for one draw.
-- Guarantees: each ticket is handed out once; ejected members and members at their daily
-- or window cap are skipped (the skipped tickets are consumed); in a `tiers` pool, a tier
-- whose every channel is capped or ejected is passed over for the fallback as an empty
-- one is, before any of its tickets is popped; the day is the pool's
-- local day and the window the epoch-aligned window by Redis TIME; the standby batch is
-- promoted whole, atomically; a refill is asked for (flag set, pool name published on
-- ARGV[5]) once per crossing of low-water; every ticket handed out is in the draw log's
-- entry of the call (when the log is on), in order.
local st = pool_state(KEYS[2])
if not st then return {'unknown_pool'} end
local version = st.version
local low_water = st.low_water

local now = pool_now()
local hits, day_end = pool_day(st, KEYS[6], KEYS[7], now)
if not hits then
  if day_end[1] == 'no_day' then return {'no_day', version} end
  return day_end
end
local whits, window_end = pool_window(st, KEYS[15], KEYS[16], now, 8)
if whits == false then return window_end end
-- The members handed out by this call, for the draw log.
local logged = {}

-- Sets the refill flag; publishes the request when the flag was not set yet.
local function ask_refill()
  if redis.call('SET', KEYS[8], '1', 'NX') then
    redis.call('PUBLISH', ARGV[5], ARGV[6])
    return 1
  end
  return 0
end

local skipped_ejected, skipped_capped = 0, 0
local from = 'list'
local max_skips = tonumber(ARGV[4])
local tier_list = {G = KEYS[9], N = KEYS[10], U = KEYS[11]}
local tier_standby = {G = KEYS[12], N = KEYS[13], U = KEYS[14]}

-- The next ticket of the pool's list, promoting the standby batch when the list is empty.
local function next_ticket()
  local ticket = redis.call('LPOP', KEYS[3])
  if not ticket and redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('RENAME', KEYS[4], KEYS[3])
    ask_refill()
    from = 'standby'
    ticket = redis.call('LPOP', KEYS[3])
  end
  return ticket
end

-- Whether a member may be drawn (not ejected, not at its cap); counts what is skipped.
local function drawable(member)
  if st.ejected and redis.call('SISMEMBER', KEYS[5], member) == 1 then
    skipped_ejected = skipped_ejected + 1
    return false
  end
  if st.capped and at_cap(KEYS[1], hits, member, whits, window_end, st.wlen) then
    skipped_capped = skipped_capped + 1
    return false
  end
  return true
end

local function hand_out(member, drawn_tier, served_tier)
  count_hit(hits, member, day_end, whits, window_end, st.wlen)
  logged[#logged + 1] = member
  local length = redis.call('LLEN', KEYS[3])
  local flagged = 0
  if length < low_water then flagged = ask_refill() end
  return {'ticket', member, version, from, skipped_ejected, skipped_capped, length, flagged,
    drawn_tier or '', served_tier or ''}
end

-- One draw: its reply.
local function draw_one()
  skipped_ejected, skipped_capped, from = 0, 0, 'list'
  if not st.tiers then
    for _ = 1, max_skips do
      local ticket = next_ticket()
      if not ticket then
        ask_refill()
        -- The tickets left were of members at their caps: the pool is capped, not empty,
        -- and the caller's local pool (which knows no day counts) must not serve them.
        if skipped_capped > 0 then return {'exhausted', version, skipped_ejected, skipped_capped} end
        return {'empty', version}
      end
      if drawable(ticket) then return hand_out(ticket) end
    end
    ask_refill()
    return {'exhausted', version, skipped_ejected, skipped_capped}
  end

  -- A tiers pool: the ticket is a tier; the member comes from the serving tier's list.
  local drawn = next_ticket()
  if not drawn then
    ask_refill()
    return {'empty', version}
  end
  -- A tier can serve while its list or its standby batch holds a ticket, and (with caps
  -- or ejections) one of its channels is neither at its cap nor ejected: a tier whose
  -- every channel is capped counts as unavailable, as an empty one does, and its tickets
  -- are not popped for nothing.
  local avail = {}
  for t, key in pairs(tier_list) do
    avail[t] = redis.call('LLEN', key) > 0 or redis.call('EXISTS', tier_standby[t]) == 1
    if not avail[t] then ask_refill() end
  end
  local checked = {}
  local function tier_can_serve(t)
    if not (st.capped or st.ejected) or checked[t] then return true end
    checked[t] = true
    local members = redis.call('HGET', KEYS[1], 'tm:' .. t)
    -- Published before tiers' channels were listed: every channel counts as drawable.
    if not members then return true end
    for member in string.gmatch(members, '[^,]+') do
      if not (st.ejected and redis.call('SISMEMBER', KEYS[5], member) == 1)
        and not (st.capped and at_cap(KEYS[1], hits, member, whits, window_end, st.wlen)) then
        return true
      end
    end
    return false
  end
  for _ = 1, max_skips do
    local served = tier_fallback(drawn, avail)
    -- A tier that cannot serve leaves the fallback before any of its tickets is popped
    -- (each tier is looked at once per draw).
    while served and not tier_can_serve(served) do
      avail[served] = false
      served = tier_fallback(drawn, avail)
    end
    if not served then break end
    local member = redis.call('LPOP', tier_list[served])
    if not member and redis.call('EXISTS', tier_standby[served]) == 1 then
      redis.call('RENAME', tier_standby[served], tier_list[served])
      ask_refill()
      member = redis.call('LPOP', tier_list[served])
    end
    if not member then
      avail[served] = false
      ask_refill()
    else
      if redis.call('LLEN', tier_list[served]) < low_water then ask_refill() end
      if drawable(member) then return hand_out(member, drawn, served) end
    end
  end
  ask_refill()
  return {'exhausted', version, skipped_ejected, skipped_capped}
end

-- n draws of a `channels` pool with nothing to skip (no member ejected or capped): the
-- tickets popped n at a time (LPOP with a count), the hits counted once per member, the
-- length read and low-water checked once at the end. The same tickets in the same order,
-- the same hits and the same refill request as n single draws, in a few calls. Replies
-- compactly: {"many", version, length_after, refill_flagged 0|1, from_list, ended_empty
-- 0|1, day, rebuilds, member, ...}: the first from_list tickets came from the list, the
-- rest from the promoted standby batch; ended_empty = 1 when the tickets ran out before n;
-- day is the day whose hits counted them and rebuilds the state's count of list rebuilds
-- (a lease returning tickets takes them back from that day, and only into the same list).
local function draw_many(n)
  local members, counts = {}, {}
  local from_list, ended_empty = nil, 0
  while #members < n do
    local got = redis.call('LPOP', KEYS[3], n - #members)
    if not got and redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('RENAME', KEYS[4], KEYS[3])
      ask_refill()
      from_list = from_list or #members
      got = redis.call('LPOP', KEYS[3], n - #members)
    end
    if not got then
      ask_refill()
      ended_empty = 1
      break
    end
    for _, member in ipairs(got) do
      counts[member] = (counts[member] or 0) + 1
      members[#members + 1] = member
    end
  end
  for member, c in pairs(counts) do
    if redis.call('HINCRBY', hits, member, c) == c then
      redis.call('PEXPIREAT', hits, string.format('%.0f', day_end + 48 * 3600 * 1000))
    end
  end
  local length = redis.call('LLEN', KEYS[3])
  local flagged = 0
  if length < low_water then flagged = ask_refill() end
  local day = ARGV[1]
  if hits == KEYS[7] then day = ARGV[2] end
  local reply = {'many', version, length, flagged, from_list or #members, ended_empty, day,
    st.rebuilds}
  for _, member in ipairs(members) do reply[#reply + 1] = member end
  logged = members
  return reply
end

local n = tonumber(ARGV[7] or '1') or 1
local reply
if n <= 1 then
  reply = draw_one()
elseif not st.tiers and not st.ejected and not st.capped then
  reply = draw_many(n)
else
  local replies = {}
  for _ = 1, n do
    local r = draw_one()
    replies[#replies + 1] = r
    if r[1] ~= 'ticket' then break end
  end
  local day = ARGV[1]
  if hits == KEYS[7] then day = ARGV[2] end
  reply = {'batch', replies, day, st.rebuilds}
end
log_draws(KEYS[17], st, now, logged)
return reply
