-- chunk_lib.lua: chunks of a tenant's tokens held by one instance (a hot tenant's
-- reserves then skip the walk over its buckets). Part of the quota library, after
-- quota_lib.lua, whose helpers it uses.
--
-- KEYS[9] chunks hash: holder (an instance's name) -> "bucket|period|left|deadline|version|gen"
--
-- A chunk's tokens are counted as reserved in their bucket (r:<grant>, r:plan:<period>)
-- from the moment they are taken: every check of the exact path (available()) sees them as
-- taken, so the limit holds fleet-wide whoever reserves. A reservation served from a
-- chunk moves its tokens from the chunk to the reservation (the bucket's reserved amount
-- does not change); settle, release and the sweeper then treat it as any reservation.
-- Returning a chunk takes what is left of it off the bucket's reserved amount.
--
-- A chunk serves only while it is usable: its deadline (the holder's lease, and never past
-- the period's end, its grant's expiry or a grant's start) has not passed, the tenant's
-- snapshot version and the counters' generation are those it was taken under, and for a
-- plan chunk the period is the current one. A chunk that is not usable, or too small for a
-- request, is returned before the request goes the exact way. An expired chunk (its holder
-- died) is returned by the sweeper, by any take, and by a reserve about to be refused for
-- tokens; the last two also return chunks that can serve no reservation any more.

local function decode_chunk(s)
  local bucket, period, left, deadline, version, gen =
    string.match(s or '', '^([^|]*)|([^|]*)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not bucket then return nil end
  return {bucket = bucket, period = period, left = tonumber(left), deadline = tonumber(deadline),
    version = tonumber(version), gen = gen}
end

local function encode_chunk(c)
  return table.concat({c.bucket, c.period, fmt(c.left), fmt(c.deadline), fmt(c.version), c.gen}, '|')
end

-- The call's chunks, each read at most once and written once, by flush_chunks() after the
-- body (a batch of reserves from one chunk writes it once, not once per request): holder ->
-- chunk, or false for none; DIRTY: the holders whose chunk changed. begin_chunks() starts
-- every call with none cached.
local CHUNKS, CHUNKS_DIRTY

local function begin_chunks()
  CHUNKS, CHUNKS_DIRTY = {}, {}
end

-- `holder`'s chunk (nil: none). An unreadable record counts as none and is removed.
local function chunk_get(holder)
  local c = CHUNKS[holder]
  if c == nil then
    local raw = redis.call('HGET', KEYS[9], holder)
    c = (raw and decode_chunk(raw)) or false
    if raw and not c then CHUNKS_DIRTY[holder] = true end
    CHUNKS[holder] = c
  end
  return c or nil
end

-- Sets `holder`'s chunk (nil: none), written by flush_chunks().
local function chunk_put(holder, c)
  CHUNKS[holder] = c or false
  CHUNKS_DIRTY[holder] = true
end

-- Writes the chunks the call changed: kept with what is left, removed when nothing is.
local function flush_chunks()
  for holder in pairs(CHUNKS_DIRTY) do
    local c = CHUNKS[holder]
    if c and c.left > 0 then
      redis.call('HSET', KEYS[9], holder, encode_chunk(c))
    else
      redis.call('HDEL', KEYS[9], holder)
    end
  end
  CHUNKS, CHUNKS_DIRTY = nil, nil
end

-- Gives what is left of `holder`'s chunk `c` (nil: unreadable) back to its bucket and
-- forgets the chunk; returns the tokens given back. A chunk of another generation of the
-- counters (restored since) holds nothing in them: it is only forgotten.
local function chunk_return(holder, c)
  chunk_put(holder, nil)
  if not c or c.gen ~= (state_string('gen') or '') or c.left <= 0 then return 0 end
  local field = reserved_field(c.bucket, c.period)
  if hincr(KEYS[2], field, -c.left) <= 0 then hdrop(KEYS[2], field) end
  return c.left
end

-- Whether chunk `c` may serve a reservation now (see above). A plan chunk serves no
-- reservation while the plan is overdrawn (a settle beyond its reservation took it below
-- zero), as the exact path admits none then.
local function chunk_usable(c, meta)
  if c.gen ~= (state_string('gen') or '') or c.version ~= meta.version or c.deadline <= NOW then return false end
  if c.bucket ~= 'plan' then return true end
  return c.period == PERIOD
    and meta.monthly_tokens - hnum(KEYS[5], 'plan_used') - hnum(KEYS[2], 'r:plan:' .. PERIOD) >= 0
end

-- Returns every chunk whose deadline passed, whoever holds it, and with `meta` every chunk
-- that can serve no reservation any more (an older snapshot, a past period, counters
-- restored since): {chunks, tokens}.
local function reclaim_expired(meta)
  local flat = redis.call('HGETALL', KEYS[9])
  local n, tokens = 0, 0
  for i = 1, #flat, 2 do
    local holder = flat[i]
    -- What this call has made of a holder's chunk wins over what Redis holds yet (a chunk
    -- it took is not in Redis yet: it is usable, nothing to reclaim).
    local cached = CHUNKS[holder]
    local c
    if cached == nil then c = decode_chunk(flat[i + 1]) else c = cached or nil end
    if (cached == nil or cached) and (not c or c.deadline <= NOW or (meta and not chunk_usable(c, meta))) then
      tokens = tokens + chunk_return(holder, c)
      n = n + 1
    end
  end
  return n, tokens
end

-- Takes a chunk for `holder` from the first live bucket (in paying order) with a balance:
-- `want` tokens, clamped to 0.1-1 % of the tenant's limit, at least `need` (the request
-- it is taken for), at most that bucket's balance and an eighth of what is available (a
-- bounded share of what remains). nil when that is less than `need`: near the end of the
-- quota, reserves go the exact way. The chunk lasts `lease_ms` (see above for less).
local function chunk_take(meta, holder, want, need, lease_ms)
  -- Counters from before the usage ledger (no generation) take no chunk: adopting them
  -- keeps their reserved amounts under a new generation, which a chunk's could not follow.
  if not state_string('gen') then return nil end
  reclaim_expired(meta)
  local buckets = live_buckets(meta)
  local free = available(buckets)
  local limit = token_limit(meta, buckets)
  local deadline = math.min(NOW + lease_ms, PERIOD_END)
  local first
  for _, b in ipairs(buckets) do
    if not first and b.left > 0 then first = b end
  end
  -- A grant that starts later would pay before this chunk's bucket, or beside it.
  for _, g in ipairs(meta.grants) do
    local starts = g.starts_at_ms
    if starts ~= nil and starts ~= cjson.null and starts > NOW then deadline = math.min(deadline, starts) end
  end
  if not first then return nil end
  local size = math.max(math.min(want, math.floor(limit / 100)), math.floor(limit / 1000), need)
  size = math.min(size, first.left, math.floor(free / 8))
  if size < need or size <= 0 then return nil end
  if first.expires then deadline = math.min(deadline, first.expires) end
  hincr(KEYS[2], reserved_field(first.id, PERIOD), size)
  first.left = first.left - size
  local c = {bucket = first.id, period = PERIOD, left = size, deadline = deadline, version = meta.version,
    gen = state_string('gen') or ''}
  chunk_put(holder, c)
  return c
end

-- A reserve's chunk argument "holder|want|lease_ms" ('' for none), parsed once per call.
local CHUNK_ARG, CHUNK_SPEC
local function chunk_spec(arg)
  if arg == nil or arg == '' then return nil end
  if arg ~= CHUNK_ARG then
    local holder, want, lease = string.match(arg, '^([^|]+)|(%d+)|(%d+)$')
    if not holder then error('bad chunk argument ' .. arg, 0) end
    CHUNK_ARG, CHUNK_SPEC = arg, {holder = holder, want = tonumber(want), lease = tonumber(lease)}
  end
  return CHUNK_SPEC
end

-- The chunk that serves `need` tokens for the holder of `spec`: its own when usable and
-- large enough, else (after returning the one it held) a new one when it wants one; nil
-- when none serves (then the holder holds none).
local function chunk_for(spec, meta, need)
  local c = chunk_get(spec.holder)
  if c and (not chunk_usable(c, meta) or c.left < need) then
    chunk_return(spec.holder, c)
    c = nil
  end
  if not c and spec.want > 0 then c = chunk_take(meta, spec.holder, spec.want, need, spec.lease) end
  return c
end

-- Takes `need` tokens from the holder's chunk `c` (which holds them): the chunk is kept
-- with what is left, or forgotten when nothing is (at the call's end).
local function chunk_spend(holder, c, need)
  c.left = c.left - need
  chunk_put(holder, c)
end
