-- record_outcome.lua: adds one report of a channel's outcomes to the channel's bucket of
-- the current minute (what the health evaluation reads, design.md §5).
-- KEYS[1] health hash  {prefix}:health:{<channel>}; fields per unix minute m:
--         m:ok  m:fail  m:lat_ms (sum of latencies in ms)  m:lat_n (latencies summed)
-- ARGV[1] now in ms since the epoch, or "" to read Redis TIME (the one clock)
-- ARGV[2] ok   ARGV[3] fail   ARGV[4] latency ms sum   ARGV[5] latency count
--         (decimal integers: counts 0..10^4, the latency sum 0..10^9, checked by the
--         client, ok + fail >= 1)
-- ARGV[6] seconds the hash lives after its last write
-- Returns the unix minute (floor(now / 60 s)) the counts were added to.
-- Guarantees: a report's four counts land in one minute together (a counter that would
-- add 0 is not written); the hash expires ARGV[6] seconds after its last write. Old
-- minutes are removed by the health evaluation (HDEL), not here.
local now_ms
if ARGV[1] ~= '' then
  now_ms = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local minute = math.floor(now_ms / 60000)
local m = string.format('%.0f', minute)
local suffixes = { 'ok', 'fail', 'lat_ms', 'lat_n' }
for i, suffix in ipairs(suffixes) do
  local n = ARGV[i + 1]
  if n ~= '0' then
    redis.call('HINCRBY', KEYS[1], m .. ':' .. suffix, n)
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[6])
return minute
