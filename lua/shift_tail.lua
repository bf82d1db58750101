-- shift_tail.lua: moves up to ARGV[1] tickets, one at a time, from the tail of a pool's
-- list onto the head of its standby batch, while the standby batch exists and the list
-- holds more than ARGV[2]. Draws see the list, then the standby batch, in the same order
-- before and after each call: it only shortens what an append of refill_pool.lua must
-- copy when it moves the standby batch onto the list, so no call holds Redis for a batch.
-- KEYS[1] tickets  KEYS[2] standby
-- ARGV[1] the most tickets moved   ARGV[2] the list's length to stop at
-- Returns the list's length after (its length, untouched, when there is no standby batch).
local length = redis.call('LLEN', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then return length end
local moves = math.min(tonumber(ARGV[1]), length - tonumber(ARGV[2]))
for _ = 1, moves do
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
end
return length - math.max(moves, 0)
