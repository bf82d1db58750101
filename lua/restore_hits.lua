-- restore_hits.lua: gives a pool's day counters back from a sample (after Redis lost them):
-- each member's draws that day become at least the sampled count.
-- KEYS[1] the hits hash of the sample's day
-- ARGV[1] when the hash expires (ms since the epoch); ARGV[2..] member, count, ...
-- Returns how many members were raised.
-- Guarantees: a counter never goes down (counts only grow within a day, so a Redis that
-- kept its counters is left as it is); at most one sample interval of draws is missing.
local raised = 0
for i = 2, #ARGV, 2 do
  local current = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if current < tonumber(ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    raised = raised + 1
  end
end
if raised > 0 and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[1])
end
return raised
