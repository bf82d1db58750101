-- refill_pool.lua: adds one batch of tickets to a pool's list, exactly once. A pool of
-- kind `tiers` has one list of tier tickets and one list per tier; each is refilled alike,
-- with its own sequence and apportioner fields in the state hash.
-- KEYS[1] meta  KEYS[2] state  KEYS[3] tickets  KEYS[4] standby  KEYS[5] refill flag
-- KEYS[6] staging list (a batch too large for one call, pushed there first; may not exist)
-- ARGV[1] the snapshot version the batch was built from
-- ARGV[2] the batch sequence number the builder read (state[ARGV[5]], 0 when absent)
-- ARGV[3] mode: "append" (only while the list is below low-water; when a standby batch
--         exists it is moved onto the list and this batch, built to follow it, becomes the
--         standby batch), "standby" (only while there is no standby batch) or "replace"
--         (drop the remaining tickets and the standby batch: an immediate reweight or a
--         rebuild; counted in the state's `rebuilds`, which ticket leases check on return)
-- ARGV[4] the apportioner state after this batch (JSON, stored as is)
-- ARGV[5] the state field of this list's sequence ("seq", or "seq:G" for tier G's list)
-- ARGV[6] the state field of its apportioner ("apportioner", "apportioner:G")
-- ARGV[7..] the tickets, in order; none when the batch is in the staging list
-- Returns {"ok", seq, length} (seq: the new sequence number; length: the ticket list's
-- length after, or the standby batch's in "standby" mode), or {"stale", seq} (another
-- refiller was first: nothing written), {"stale_version", version},
-- {"not_needed", length}, {"unknown_pool"}.
-- Guarantees: the whole batch or nothing; under any number of concurrent refillers that
-- read the same seq, one batch is added; batches reach the ticket list in the order they
-- were built (a standby batch is never overtaken by a later one).
-- Bounded work: a batch is never copied whole. A staged batch takes its list's name
-- (RENAME) when the list is empty, or gets the short list's tickets in front of it first;
-- the standby batch moves onto a list below low-water the same way. Only the shorter of
-- two lists is ever copied (at most low-water tickets), and lists dropped are UNLINKed
-- (freed in the background), so no call holds Redis for the size of a batch.
local function move_onto(from, to)
  local nf, nt = redis.call('LLEN', from), redis.call('LLEN', to)
  if nf == 0 then
    redis.call('UNLINK', from)
    return
  end
  if nt <= nf then
    -- `to`'s tickets in front of `from`'s, last chunk first (LPUSH reverses its arguments).
    local last = nt - 1
    while last >= 0 do
      local first = math.max(0, last - 999)
      local chunk = redis.call('LRANGE', to, first, last)
      local reversed = {}
      for i = #chunk, 1, -1 do reversed[#reversed + 1] = chunk[i] end
      redis.call('LPUSH', from, unpack(reversed))
      last = first - 1
    end
    redis.call('RENAME', from, to)
    redis.call('PERSIST', to)
  else
    for i = 0, nf - 1, 1000 do
      redis.call('RPUSH', to, unpack(redis.call('LRANGE', from, i, i + 999)))
    end
    redis.call('UNLINK', from)
  end
end

local version = redis.call('HGET', KEYS[1], 'version')
if not version then return {'unknown_pool'} end
if tonumber(version) ~= tonumber(ARGV[1]) then return {'stale_version', tonumber(version)} end
local seq = tonumber(redis.call('HGET', KEYS[2], ARGV[5]) or '0')
if seq ~= tonumber(ARGV[2]) then
  redis.call('UNLINK', KEYS[6])
  return {'stale', seq}
end
-- A staged batch that is gone (its staging list expired): nothing is written, the caller
-- builds another (a batch is added whole or not at all).
if #ARGV < 7 and redis.call('EXISTS', KEYS[6]) == 0 then return {'stale', seq} end
local mode = ARGV[3]
local target = KEYS[3]
if mode == 'append' then
  local low_water = tonumber(redis.call('HGET', KEYS[1], 'low_water'))
  local length = redis.call('LLEN', KEYS[3])
  if length >= low_water then
    redis.call('UNLINK', KEYS[6])
    redis.call('DEL', KEYS[5])
    return {'not_needed', length}
  end
  -- The standby batch was built to follow the list's tail and this batch (the builder
  -- read the same seq, so the same standby) to follow the standby's: keep that order.
  -- (When a draw promoted the standby meanwhile, the list is that batch: append to it.)
  if redis.call('EXISTS', KEYS[4]) == 1 then
    move_onto(KEYS[4], KEYS[3])
    target = KEYS[4]
  end
elseif mode == 'standby' then
  if redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('UNLINK', KEYS[6])
    return {'not_needed', redis.call('LLEN', KEYS[4])}
  end
  target = KEYS[4]
elseif mode == 'replace' then
  redis.call('UNLINK', KEYS[3], KEYS[4])
  -- Leased tickets taken before a rebuild must not come back into the new list.
  redis.call('HINCRBY', KEYS[2], 'rebuilds', 1)
else
  return redis.error_reply('refill_pool: unknown mode ' .. mode)
end

local chunk = 1000
if #ARGV >= 7 then
  for i = 7, #ARGV, chunk do
    redis.call('RPUSH', target, unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
  end
else
  move_onto(KEYS[6], target)
end
redis.call('HSET', KEYS[2], ARGV[5], seq + 1, ARGV[6], ARGV[4])
if mode ~= 'standby' then redis.call('DEL', KEYS[5]) end
if mode == 'standby' then return {'ok', seq + 1, redis.call('LLEN', KEYS[4])} end
return {'ok', seq + 1, redis.call('LLEN', KEYS[3])}
