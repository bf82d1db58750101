-- shift_tail.lua: moves up to ARGV[1] tickets, one at a time, from the tail of a pool's
-- list onto the head of its standby batch, while the standby batch exists, the list holds
-- more than ARGV[2] and the list's batch sequence is still the one the caller read. Draws
-- see the list, then the standby batch, in the same order before and after each call: it
-- only shortens what an append of refill_pool.lua must copy when it moves the standby
-- batch onto the list, so no call holds Redis for a batch.
-- KEYS[1] tickets  KEYS[2] standby  KEYS[3] state
-- ARGV[1] the most tickets moved   ARGV[2] the list's length to stop at
-- ARGV[3] the state field of the list's sequence ("seq", "seq:G")   ARGV[4] its value read
-- Returns how many tickets moved, or -1 when there is nothing to shift for this refill:
-- no standby batch (a draw promoted it) or another refiller added a batch meanwhile.
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if tonumber(redis.call('HGET', KEYS[3], ARGV[3]) or '0') ~= tonumber(ARGV[4]) then return -1 end
local moves = math.min(tonumber(ARGV[1]), redis.call('LLEN', KEYS[1]) - tonumber(ARGV[2]))
for _ = 1, moves do
  redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
end
return math.max(moves, 0)
