-- count_draw.lua: counts a draw the client chose itself (a sticky draw by consistent
-- hashing) in the pool's day counters, unless the member is ejected or at its daily cap.
-- Prepended by pool_lib.lua.
-- KEYS[1] meta  KEYS[2] state  KEYS[3] ejected  KEYS[4] hits of ARGV[1]'s day
-- KEYS[5] hits of ARGV[2]'s day
-- ARGV[1], ARGV[2] the days the caller passed keys for; ARGV[3] now in ms or "" (Redis
-- TIME); ARGV[4] the member
-- Returns {"counted", version} | {"capped"} | {"ejected"} | {"day", day0, day1} |
-- {"no_day"} | {"unknown_pool"}
local st = pool_state(KEYS[2])
if not st then return {'unknown_pool'} end
local version = st.version
local hits, day_end = pool_day(st, KEYS[4], KEYS[5], pool_now())
if not hits then return day_end end
local member = ARGV[4]
if st.ejected and redis.call('SISMEMBER', KEYS[3], member) == 1 then return {'ejected'} end
if st.capped and at_cap(KEYS[1], hits, member) then return {'capped'} end
count_hit(hits, member, day_end)
return {'counted', tonumber(version)}
