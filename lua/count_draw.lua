-- count_draw.lua: counts a draw the client chose itself (a sticky draw by consistent
-- hashing) in the pool's day counters (and its window's, with window caps), unless the
-- member is ejected or at its daily or window cap; and in the draw log when it is on.
-- Prepended by pool_lib.lua.
-- KEYS[1] meta  KEYS[2] state  KEYS[3] ejected  KEYS[4] hits of ARGV[1]'s day
-- KEYS[5] hits of ARGV[2]'s day  KEYS[6], KEYS[7] the window hits of the windows starting
-- at ARGV[5] and ARGV[6] (as in draw_ticket.lua)  KEYS[8] the draw log
-- ARGV[1], ARGV[2] the days the caller passed keys for; ARGV[3] now in ms or "" (Redis
-- TIME); ARGV[4] the member; ARGV[5], ARGV[6] the windows ("-" when unknown)
-- Returns {"counted", version} | {"capped"} | {"ejected"} | {"day", day0, day1} |
-- {"window", start, length} | {"no_day"} | {"unknown_pool"}
local st = pool_state(KEYS[2])
if not st then return {'unknown_pool'} end
local version = st.version
local now = pool_now()
local hits, day_end = pool_day(st, KEYS[4], KEYS[5], now)
if not hits then return day_end end
local whits, window_end = pool_window(st, KEYS[6], KEYS[7], now, 5)
if whits == false then return window_end end
local member = ARGV[4]
if st.ejected and redis.call('SISMEMBER', KEYS[3], member) == 1 then return {'ejected'} end
if st.capped and at_cap(KEYS[1], hits, member, whits, window_end, st.wlen) then return {'capped'} end
count_hit(hits, member, day_end, whits, window_end, st.wlen)
log_draws(KEYS[8], st, now, {member})
return {'counted', tonumber(version)}
