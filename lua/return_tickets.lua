-- return_tickets.lua: gives back the tickets an instance leased and did not serve.
-- KEYS[1] state    hash  the pool's runtime state (version, rebuilds)
-- KEYS[2] tickets  list  the pool's tickets, drawn from the left
-- KEYS[3] hits     hash  member -> draws on the day the tickets were leased
-- KEYS[4] draw log stream  the pool's draw log (see draw_ticket.lua)
-- ARGV[1] the version the tickets came from   ARGV[2] the state's rebuilds then
-- ARGV[3..] the tickets, in the order they would have been served
-- Returns {"returned", n}: pushed back to the head of the list in their order; or
-- {"dropped", n}: the pool has another version, or its list was rebuilt, since: the new
-- list must not take tickets of the old one. Either way each ticket's draw is taken back
-- from the day's hits (a leased ticket was counted when taken, as a draw is), never below
-- zero and never recreating an expired day; and, when the pool keeps a draw log, the
-- tickets are written to it as returned (`r`: the log had them as drawn when leased).
local n = #ARGV - 2
if n <= 0 then return {'returned', 0} end
if redis.call('HGET', KEYS[1], 'drawlog') == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', '200000', '*', 't', string.format('%.0f', now),
    'r', table.concat(ARGV, ',', 3))
end
local counts = {}
for i = 3, #ARGV do
  counts[ARGV[i]] = (counts[ARGV[i]] or 0) + 1
end
for member, c in pairs(counts) do
  local held = tonumber(redis.call('HGET', KEYS[3], member) or '0')
  if held > 0 then redis.call('HINCRBY', KEYS[3], member, -math.min(c, held)) end
end
local state = redis.call('HMGET', KEYS[1], 'version', 'rebuilds')
if state[1] ~= ARGV[1] or (state[2] or '0') ~= ARGV[2] then return {'dropped', n} end
-- LPUSH puts each value at the head in turn: push the last ticket first.
for i = #ARGV, 3, -1 do
  redis.call('LPUSH', KEYS[2], ARGV[i])
end
return {'returned', n}
