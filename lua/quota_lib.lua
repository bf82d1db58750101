-- quota_lib.lua: shared by every quota script. The client loads it once per primary as a
-- Redis Functions library (client/src/scripts.rs: FUNCTION LOAD, then one FCALL per
-- operation): this file, then each script's body as a local function, then one function
-- registered per script. So the helpers below are compiled once, not on every call; what
-- a call may change is reset by begin() (at the end) before each body runs. KEYS and ARGV
-- are the call's keys and arguments (locals of the library that begin() sets), as in a
-- script. Defines no keys of its own.
--
-- Every quota script takes the same nine KEYS:
--   KEYS[1] meta     hash  the tenant's published snapshot (version, monthly_tokens,
--                          daily_requests, concurrency, grants JSON, reservation_ttl_ms,
--                          retention_days, policy, fallback_allowance)
--   KEYS[2] state    hash  r:<bucket> reserved per bucket (plan bucket: r:plan:<period>),
--                          u:<grant> tokens used per grant (grants outlive periods),
--                          gen: this copy's generation (set when the counters were
--                          restored from the usage ledger or adopted), restored_upto:
--                          the last ledger row the restore included
--   KEYS[3] ledger   hash  request id -> open reservation "period|amount|deadline|parts"
--   KEYS[4] leases   zset  request id -> deadline (ms); its size is the concurrency in use
--   KEYS[5] current  hash  the current period: plan_used, req:<day> (and the done:<request
--                          id> fields written before done markers had keys of their own)
--   KEYS[6] previous hash  the previous period (reservations made before the month turned)
--   KEYS[7] usage    stream every settle, release and expiry, as it changed the counters,
--                          for the Postgres usage ledger (drained by the leader)
--   KEYS[8] done     the prefix of the done markers (see "Done markers" below): hashes
--                          KEYS[8] .. "#<gen>#<window>#<bucket>". These keys are not
--                          declared one by one (a script does not know them in advance);
--                          they share the tenant's hash tag, so they live in the slot of
--                          every declared key of the call. (Before the idempotency window,
--                          KEYS[8] .. <request id> was a string key per marker.)
--   KEYS[9] chunks   hash  holder -> a chunk of tokens an instance holds (chunk_lib.lua)
-- and the same first three ARGV:
--   ARGV[1] the current period "YYYY-MM" the caller assumes (UTC)
--   ARGV[2] the previous period "YYYY-MM"
--   ARGV[3] now in ms since the epoch, or "" to read Redis TIME (the one clock)
-- A caller whose period is not Redis's gets {"period", <actual period>} and retries.
--
-- Amounts stay below 2^53 (checked by the client), so Lua doubles hold them exactly; they
-- are formatted with %.0f, never tostring (which rounds to 14 digits).
--
-- Counters are read and changed through a write-back cache (hnum, hincr, hdrop): each
-- field is read at most once per call and written at most once, by flush(), which the
-- library's entry runs after every script's body (a batch of coalesced requests touches the
-- tenant's counters once, not once per request). Expiries (touch_period, touch_previous)
-- are set by flush() after the writes, so a hash the call created gets its expiry.

-- The call's keys and arguments (set by begin()).
local KEYS, ARGV

local function fmt(n) return string.format('%.0f', n) end

local function now_ms()
  if ARGV[3] ~= '' then return tonumber(ARGV[3]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Howard Hinnant's civil_from_days / days_from_civil (proleptic Gregorian, UTC).
local function civil(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- The clock, the period and the day of the call (set by begin()), checked against the
-- caller's period; the period's first and last instant (ms).
local NOW, PERIOD, DAY, PERIOD_START, PERIOD_END

local function period_mismatch()
  if PERIOD ~= ARGV[1] then return {'period', PERIOD} end
  return nil
end

-- The hash of a period, when it is one the caller passed.
local function period_key(period)
  if period == ARGV[1] then return KEYS[5] end
  if period == ARGV[2] then return KEYS[6] end
  return nil
end

local function read_meta()
  local m = redis.call('HMGET', KEYS[1], 'version', 'monthly_tokens', 'daily_requests',
    'concurrency', 'grants', 'reservation_ttl_ms', 'retention_days', 'idempotency_window_ms')
  if not m[1] then return nil end
  return {
    version = tonumber(m[1]),
    monthly_tokens = tonumber(m[2]),
    daily_requests = tonumber(m[3]),
    concurrency = tonumber(m[4]),
    grants = cjson.decode(m[5] or '[]'),
    reservation_ttl_ms = tonumber(m[6]),
    retention_days = tonumber(m[7]),
    -- Snapshots published before the window was a setting: the default hour.
    window_ms = tonumber(m[8] or '3600000'),
  }
end

-- The write-back cache: key -> field -> {value, dirty, drop}; the expiries to set (new
-- tables for each call: begin()).
local CACHE, EXPIRE_AT

-- The cached fields of `key` (a table kept for the call).
local function fields_of(key)
  local fields = CACHE[key]
  if not fields then
    fields = {}
    CACHE[key] = fields
  end
  return fields
end

-- Caches values an HMGET read (`values[i + skip]` for `names[i]`) as counters, absent
-- reading 0, except fields cached already (the call may have changed them).
local function fill(fields, names, values, skip)
  for i, name in ipairs(names) do
    if not fields[name] then
      fields[name] = {value = tonumber(values[i + skip] or '0') or 0, dirty = false, drop = false}
    end
  end
end

local function cached(key, field)
  local fields = fields_of(key)
  local entry = fields[field]
  if not entry then
    entry = {value = tonumber(redis.call('HGET', key, field) or '0'), dirty = false, drop = false}
    fields[field] = entry
  end
  return entry
end

-- A counter's value (0 when absent).
local function hnum(key, field)
  return cached(key, field).value
end

-- Adds `delta` to a counter; returns the new value.
local function hincr(key, field, delta)
  local entry = cached(key, field)
  entry.value = entry.value + delta
  entry.dirty, entry.drop = true, false
  return entry.value
end

-- Removes a counter (it reads 0 from now on), without reading it first.
local function hdrop(key, field)
  local fields = fields_of(key)
  fields[field] = {value = 0, dirty = true, drop = true}
end

-- Values per HSET or HDEL that flush() writes at once (an even number: field, value).
local FLUSH_CHUNK = 1000

-- Writes the changed counters (one HSET and one HDEL per hash, unless it holds more than
-- FLUSH_CHUNK values), then the expiries.
local function flush()
  for key, fields in pairs(CACHE) do
    local set, drop = {}, {}
    for field, entry in pairs(fields) do
      if entry.dirty then
        if entry.drop then
          drop[#drop + 1] = field
        else
          set[#set + 1] = field
          set[#set + 1] = fmt(entry.value)
        end
        entry.dirty = false
      end
    end
    -- In chunks: unpack puts every value on Lua's stack, which holds some 8,000.
    for i = 1, #set, FLUSH_CHUNK do
      redis.call('HSET', key, unpack(set, i, math.min(i + FLUSH_CHUNK - 1, #set)))
    end
    for i = 1, #drop, FLUSH_CHUNK do
      redis.call('HDEL', key, unpack(drop, i, math.min(i + FLUSH_CHUNK - 1, #drop)))
    end
  end
  for key, at in pairs(EXPIRE_AT) do redis.call('PEXPIREAT', key, fmt(at)) end
  EXPIRE_AT = {}
end

-- The number of open reservations (the concurrency in use), read once per call; ZADD and
-- ZREM of KEYS[4] go through lease_add and lease_remove so it stays true.
local LEASE_COUNT
local function lease_count()
  if not LEASE_COUNT then LEASE_COUNT = redis.call('ZCARD', KEYS[4]) end
  return LEASE_COUNT
end

local function lease_add(rid, deadline)
  local added = redis.call('ZADD', KEYS[4], fmt(deadline), rid)
  if LEASE_COUNT then LEASE_COUNT = LEASE_COUNT + added end
end

local function lease_remove(rid)
  local removed = redis.call('ZREM', KEYS[4], rid)
  if LEASE_COUNT then LEASE_COUNT = LEASE_COUNT - removed end
end

-- A string field of the state hash that no quota script changes (gen), read once per call.
local STATE_STRINGS
local function state_string(field)
  local v = STATE_STRINGS[field]
  if v == nil then
    v = redis.call('HGET', KEYS[2], field) or false
    STATE_STRINGS[field] = v
  end
  return v or nil
end

-- Keeps the current period's hash until its retention after the period ends.
local function touch_period(meta)
  EXPIRE_AT[KEYS[5]] = PERIOD_END + meta.retention_days * 86400000
end

-- The same for the previous period's hash (it ended when the current period began); a
-- tenant no longer published keeps the default retention of 62 days.
local function touch_previous(meta)
  local days = (meta and meta.retention_days) or 62
  EXPIRE_AT[KEYS[6]] = PERIOD_START + days * 86400000
end

-- The state field holding a bucket's reserved amount.
local function reserved_field(bucket, period)
  if bucket == 'plan' then return 'r:plan:' .. period end
  return 'r:' .. bucket
end

-- The paying order of two grants {rank (bonus 0, temporary 1), priority, expires or nil, id}.
-- Byte order, as the engine compares ids (Lua's `<` on strings follows the server's
-- collation locale, which may differ from byte order).
local function bytes_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function pays_before(a, b)
  if a.rank ~= b.rank then return a.rank < b.rank end
  if a.priority ~= b.priority then return a.priority < b.priority end
  if a.expires ~= b.expires then
    if a.expires == nil then return false end
    if b.expires == nil then return true end
    return a.expires < b.expires
  end
  return bytes_before(a.id, b.id)
end

-- Live buckets in paying order (mirrors engine::quota::payment_order): bonus by priority,
-- then soonest expiry (none last), then id; temporary by soonest expiry, then id; plan.
-- left = amount - used - reserved (the plan may be negative after an overdraft).
local function live_buckets(meta)
  local list = {}
  for _, g in ipairs(meta.grants) do
    local live = (g.starts_at_ms == nil or g.starts_at_ms == cjson.null or g.starts_at_ms <= NOW)
      and (g.expires_at_ms == nil or g.expires_at_ms == cjson.null or NOW < g.expires_at_ms)
    if live then
      local expires = g.expires_at_ms
      if expires == cjson.null then expires = nil end
      list[#list + 1] = {
        id = g.id,
        rank = g.kind == 'bonus' and 0 or 1,
        priority = g.kind == 'bonus' and g.priority or 0,
        expires = expires,
        left = g.amount - hnum(KEYS[2], 'u:' .. g.id) - hnum(KEYS[2], 'r:' .. g.id),
      }
    end
  end
  table.sort(list, pays_before)
  list[#list + 1] = {
    id = 'plan', rank = 2, priority = 0,
    left = meta.monthly_tokens - hnum(KEYS[5], 'plan_used') - hnum(KEYS[2], 'r:plan:' .. PERIOD),
  }
  return list
end

-- The tenant's token limit now: the plan and every live grant (`buckets`: live_buckets()).
local function token_limit(meta, buckets)
  local amounts = {}
  for _, g in ipairs(meta.grants) do amounts[g.id] = g.amount end
  local limit = meta.monthly_tokens
  for _, b in ipairs(buckets) do
    if b.id ~= 'plan' then limit = limit + amounts[b.id] end
  end
  return limit
end

-- What can be reserved now: every live bucket's positive balance, less a plan overdraft.
local function available(buckets)
  local total = 0
  for _, b in ipairs(buckets) do
    if b.left > 0 then total = total + b.left end
  end
  local plan = buckets[#buckets]
  if plan.left < 0 then total = total + plan.left end
  if total < 0 then total = 0 end
  return total
end

-- Takes `amount` from the buckets in order; returns {{id, amount}, ...}.
local function take(buckets, amount)
  local parts = {}
  for _, b in ipairs(buckets) do
    if amount <= 0 then break end
    if b.left > 0 then
      local t = math.min(b.left, amount)
      parts[#parts + 1] = {b.id, t}
      b.left = b.left - t
      amount = amount - t
    end
  end
  return parts, amount
end

-- Adds an amount to a parts list, merging with the bucket's earlier entry.
local function add_part(parts, id, amount)
  for _, p in ipairs(parts) do
    if p[1] == id then p[2] = p[2] + amount; return end
  end
  parts[#parts + 1] = {id, amount}
end

local function encode_parts(parts)
  local out = {}
  for i, p in ipairs(parts) do out[i] = p[1] .. ':' .. fmt(p[2]) end
  return table.concat(out, ',')
end

local function decode_parts(s)
  local parts = {}
  for id, amount in string.gmatch(s, '([^:,]+):(%d+)') do
    parts[#parts + 1] = {id, tonumber(amount)}
  end
  return parts
end

-- "period|amount|deadline|parts|model" (model last: it may hold any character; entries
-- written before the model was kept end after the parts)
local function decode_entry(s)
  local period, amount, deadline, parts, rest = string.match(s, '^([^|]*)|(%d+)|(%d+)|([^|]*)(.*)$')
  local model = ''
  if rest and rest ~= '' then model = string.sub(rest, 2) end
  return {period = period, amount = tonumber(amount), deadline = tonumber(deadline), parts = parts,
    model = model}
end

-- Done markers. The outcome of a finished reservation is kept for the tenant's
-- idempotency window W (meta.window_ms, an hour by default): a repeated reserve, settle or
-- release within it is answered from here; after it, the caller answers from the usage
-- ledger in Postgres, which holds every outcome for the tenant's retention.
--
-- Markers are written in windows: a window starts at a multiple of W (or where the one
-- before ended, after W changed) and lasts W. A marker is field <request id> of one bucket
-- of the window it was written in, the hash KEYS[8] .. "#<gen>#<start>#<b>" (b = a hash of
-- the id modulo the window's bucket count), which expires at start + 2W. Look-ups read the
-- current window and the one before, so a marker answers for at least W (for at least the
-- shorter window's length after W changed). A window's bucket count is fixed when it
-- starts, for about BUCKET_TARGET markers per bucket at the previous window's rate, so
-- buckets stay small enough for Redis's compact hash encoding: memory per marker is about
-- the id and a value of some 20 bytes, not a key of its own. A window that outgrows its
-- buckets (a new tenant's first, or a rate that jumped) grows them: once a window holds
-- more than 2 * BUCKET_TARGET markers per bucket of its layout, new markers go to a layout
-- of four times as many buckets (layout k of a window of b buckets: b * 4^k buckets, the
-- hashes KEYS[8] .. "#<gen>#<start>~<k>#<b>"; layout 0 has no "~0"); look-ups read the
-- window's layouts from the newest down. So a bucket holds about BUCKET_TARGET to
-- 2 * BUCKET_TARGET markers on average at any rate, and a window that grew pays one HGET
-- per layout on a miss. The counters' generation is
-- in the key: a marker found was written with the counters of this generation (after
-- counters were lost and restored, the old markers are not found, and the ledger answers).
--
-- The state hash keeps the two windows: wc_start, wc_len, wc_b (its buckets), wc_n (its
-- markers) for the current one, wp_start, wp_len, wp_b for the one before, and wc_k, wp_k:
-- each a window's newest layout as start * 16 + k (a layout names its window, so a
-- build from before layouts, which moves the windows on without them, leaves no layout
-- on the wrong window; a window with no record has layout 0).
--
-- A marker's value: "<s|r|e><amount>|<deadline - start>|<parts>|<actual>|<charged>", where
-- parts "=" is "plan:<amount>" and charged "=" is "plan:<actual>" (no grant involved).
local BUCKET_TARGET = 64
local MAX_BUCKETS = 65536
local STATE_LETTER = {settled = 's', released = 'r', expired = 'e'}
local LETTER_STATE = {s = 'settled', r = 'released', e = 'expired'}
-- The state fields of the current and the previous window: buckets, start, length.
local MARKER_WINDOWS = {{'wc_b', 'wc_start', 'wc_len'}, {'wp_b', 'wp_start', 'wp_len'}}
local WINDOW_FIELDS = {'wc_start', 'wc_len', 'wc_b', 'wc_k', 'wc_n', 'wp_start', 'wp_len', 'wp_b', 'wp_k',
  'legacy_until'}

local function window_ms(meta)
  return (meta and meta.window_ms) or 3600000
end

-- A hash of a request id (0 .. 2^24), the same in every script.
-- Four bytes per step and one modulo: h stays below 2^24, so h * 31^4 plus the bytes stays
-- below 2^45, exact in a double, and the result is that of one byte per step.
-- (Globals such as `string` cannot be read while a library loads: looked up per call.)
local function id_hash(rid)
  local byte = string.byte
  local h, n, i = 0, #rid, 1
  while i + 3 <= n do
    local a, b, c, d = byte(rid, i, i + 3)
    h = ((((h * 31 + a) * 31 + b) * 31 + c) * 31 + d) % 16777213
    i = i + 4
  end
  while i <= n do
    h = (h * 31 + byte(rid, i)) % 16777213
    i = i + 1
  end
  return h
end

-- The bucket hash of a request id whose id_hash is `h`, in layout `k` of a window of
-- `buckets` buckets (buckets * 4^k of them).
local function bucket_key(gen, start, buckets, k, h)
  if k == 0 then return KEYS[8] .. '#' .. gen .. '#' .. fmt(start) .. '#' .. fmt(h % buckets) end
  return KEYS[8] .. '#' .. gen .. '#' .. fmt(start) .. '~' .. fmt(k) .. '#' .. fmt(h % (buckets * 4 ^ k))
end

-- A finished reservation as an old marker held it: "state|amount|deadline|parts|actual|
-- charged|gen" (gen absent from markers written in the month's hash).
local function decode_done(s)
  local state, amount, deadline, parts, actual, charged, sep, gen =
    string.match(s, '^([^|]*)|(%d+)|(%d+)|([^|]*)|(%d*)|([^|]*)(|?)(.*)$')
  if sep == '' then gen = nil end
  return {state = state, amount = tonumber(amount), deadline = tonumber(deadline), parts = parts,
    actual = tonumber(actual), charged = charged, gen = gen}
end

local function decode_marker(s, start, gen)
  local letter, amount, deadline, parts, actual, charged =
    string.match(s, '^(%a)(%d+)|(-?%d+)|([^|]*)|(%d*)|(.*)$')
  if parts == '=' then parts = 'plan:' .. amount end
  if charged == '=' then charged = 'plan:' .. actual end
  return {state = LETTER_STATE[letter], amount = tonumber(amount), deadline = tonumber(deadline) + start,
    parts = parts, actual = tonumber(actual), charged = charged, gen = gen}
end

-- How long an old marker (a key per request id) lived: the tenant's retention (62 days
-- for a tenant no longer published), at most 400 days.
local MAX_DONE_DAYS = 400
local function done_days(meta)
  return math.min((meta and meta.retention_days) or 62, MAX_DONE_DAYS)
end

-- Reads the fields of `key` not cached yet in one HMGET (counters: absent reads 0).
local function prefetch(key, names)
  local fields = fields_of(key)
  local missing = {}
  for _, name in ipairs(names) do
    if not fields[name] then missing[#missing + 1] = name end
  end
  if #missing == 0 then return end
  fill(fields, missing, redis.call('HMGET', key, unpack(missing)), 0)
end

-- The state hash's fields a call needs, read in one HMGET the first time: the generation,
-- the windows of the done markers, and `extra` (the counters the script will read; a
-- script names them before its first request so that one read serves the whole call).
local STATE_READ
local function prefetch_state(extra)
  if STATE_READ then return end
  STATE_READ = true
  local names = {}
  for _, name in ipairs(WINDOW_FIELDS) do names[#names + 1] = name end
  for _, name in ipairs(extra or {}) do names[#names + 1] = name end
  local values = redis.call('HMGET', KEYS[2], 'gen', unpack(names))
  if STATE_STRINGS.gen == nil then STATE_STRINGS.gen = values[1] or false end
  fill(fields_of(KEYS[2]), names, values, 1)
end

local function prefetch_markers() prefetch_state(nil) end

-- Sets a counter of the state hash (written by flush()).
local function hset_num(key, field, value)
  local entry = cached(key, field)
  entry.value = value
  entry.dirty, entry.drop = true, false
end

-- The newest layout of the window starting at `start`: the record (wc_k or wp_k) that names
-- it, else 0.
local function layout_of(start)
  for _, field in ipairs({'wc_k', 'wp_k'}) do
    local v = hnum(KEYS[2], field)
    if v > 0 and math.floor(v / 16) == start then return v % 16 end
  end
  return 0
end

-- How long a marker written now is answered at least: the shorter of the windows'
-- lengths (they differ for a while after W changed).
local function marker_life(meta)
  prefetch_markers()
  local life = window_ms(meta)
  for _, field in ipairs({'wc_len', 'wp_len'}) do
    local len = hnum(KEYS[2], field)
    if len > 0 and len < life then life = len end
  end
  return life
end

-- The done marker of a request id, or nil: in the current window or the one before, else
-- (for counters from before windows, within an old marker's life) its own key or a field
-- of the current or previous period's hash.
local function find_done(rid, meta)
  prefetch_markers()
  local gen = state_string('gen') or ''
  local h
  for _, w in ipairs(MARKER_WINDOWS) do
    local buckets = hnum(KEYS[2], w[1])
    local start = hnum(KEYS[2], w[2])
    -- A window's hashes expire at start + 2 * its length (also by the scripts' clock,
    -- which may be set by hand).
    if buckets > 0 and NOW < start + 2 * hnum(KEYS[2], w[3]) then
      h = h or id_hash(rid)
      for k = layout_of(start), 0, -1 do
        local raw = redis.call('HGET', bucket_key(gen, start, buckets, k, h), rid)
        if raw then return decode_marker(raw, start, gen) end
      end
    end
  end
  -- legacy_until: absent (0) for counters older than windows, until their first marker
  -- sets it; 1 for counters restored or created since (no old marker can exist).
  local legacy = hnum(KEYS[2], 'legacy_until')
  if legacy ~= 0 and legacy <= NOW then return nil end
  local raw = redis.call('GET', KEYS[8] .. rid)
  if not raw then raw = redis.call('HGET', KEYS[5], 'done:' .. rid) end
  if not raw then raw = redis.call('HGET', KEYS[6], 'done:' .. rid) end
  if raw then return decode_done(raw) end
  return nil
end

-- Writes the done marker of a finished reservation (see above). `actual` is nil for a
-- release or an expiry.
local function write_done(meta, rid, state, amount, deadline, parts, actual, charged)
  prefetch_markers()
  local gen = state_string('gen') or ''
  local start, len, buckets = hnum(KEYS[2], 'wc_start'), hnum(KEYS[2], 'wc_len'), hnum(KEYS[2], 'wc_b')
  if buckets == 0 or NOW >= start + len then
    -- A new window: at a multiple of W, not before the current one ends; its buckets for
    -- the current one's rate (when it ended within W); the current one becomes the one
    -- before.
    local w = window_ms(meta)
    local ended = start + len
    local next_start = math.max(math.floor(NOW / w) * w, ended)
    local expected = 0
    if buckets > 0 and len > 0 and next_start - ended < w then
      expected = hnum(KEYS[2], 'wc_n') * w / len
    end
    local next_buckets = math.max(1, math.min(MAX_BUCKETS, math.ceil(expected / BUCKET_TARGET)))
    hset_num(KEYS[2], 'wp_start', start)
    hset_num(KEYS[2], 'wp_len', len)
    hset_num(KEYS[2], 'wp_b', buckets)
    hset_num(KEYS[2], 'wp_k', start * 16 + layout_of(start))
    hset_num(KEYS[2], 'wc_start', next_start)
    hset_num(KEYS[2], 'wc_len', w)
    hset_num(KEYS[2], 'wc_b', next_buckets)
    hset_num(KEYS[2], 'wc_k', 0)
    hset_num(KEYS[2], 'wc_n', 0)
    start, len, buckets = next_start, w, next_buckets
    if hnum(KEYS[2], 'legacy_until') == 0 then
      hset_num(KEYS[2], 'legacy_until', NOW + done_days(meta) * 86400000)
    end
  end
  -- A window past 2 * BUCKET_TARGET markers per bucket of its newest layout grows to the
  -- layout its count needs (one step, also for a window written before layouts).
  local k = layout_of(start)
  local n = hincr(KEYS[2], 'wc_n', 1)
  local grown = k
  while n > 2 * BUCKET_TARGET * buckets * 4 ^ grown and buckets * 4 ^ (grown + 1) <= MAX_BUCKETS do
    grown = grown + 1
  end
  if grown > k then
    -- The previous window's layout stays named by wp_k (wc_k may have named it).
    local previous = hnum(KEYS[2], 'wp_start')
    hset_num(KEYS[2], 'wp_k', previous * 16 + layout_of(previous))
    hset_num(KEYS[2], 'wc_k', start * 16 + grown)
    k = grown
  end
  local parts_text = parts
  if parts == 'plan:' .. fmt(amount) then parts_text = '=' end
  local charged_text = charged
  if actual and charged == 'plan:' .. fmt(actual) then charged_text = '=' end
  local key = bucket_key(gen, start, buckets, k, id_hash(rid))
  redis.call('HSET', key, rid, table.concat({STATE_LETTER[state] .. fmt(amount), fmt(deadline - start),
    parts_text, actual and fmt(actual) or '', charged_text}, '|'))
  EXPIRE_AT[key] = start + 2 * len
end

-- `plans` (optional) adds up the plan charges per period, for the usage record.
local function charge(bucket, period, amount, plans)
  if amount <= 0 then return end
  if bucket == 'plan' then
    if plans then plans[period] = (plans[period] or 0) + amount end
    local key = period_key(period)
    -- A plan period the caller did not pass ended over a month ago; its count is gone.
    if key then hincr(key, 'plan_used', amount) end
  else
    hincr(KEYS[2], 'u:' .. bucket, amount)
  end
end

-- Charges use beyond a reservation (or after it was swept): live buckets in order as far
-- as they go, the rest to the current plan, which may go negative (an overdraft).
local function charge_now(meta, amount, plans)
  if amount <= 0 then return {} end
  local parts, rest = take(live_buckets(meta), amount)
  if rest > 0 then add_part(parts, 'plan', rest) end
  for _, p in ipairs(parts) do charge(p[1], PERIOD, p[2], plans) end
  return parts
end

-- "period:amount,..." of the plan charges per period.
local function encode_plans(plans)
  local out = {}
  for period, amount in pairs(plans) do out[#out + 1] = period .. ':' .. fmt(amount) end
  table.sort(out)
  return table.concat(out, ',')
end

-- When a reservation was made: its deadline less the tenant's reservation TTL.
local function reserved_at(meta, deadline)
  if meta and meta.reservation_ttl_ms then return deadline - meta.reservation_ttl_ms end
  return deadline
end

-- Appends one finished reservation to the usage stream, in the same script that changed
-- the counters (so the stream holds exactly what the counters hold), and returns the
-- record's fields as the reply carries them: {plans, reserved_at, at, gen, model, parts,
-- deadline}. outcome "settled" | "released" | "expired"; actual '' for a release or an
-- expiry; parts and deadline: the reservation's ('' when there was none), so the usage
-- ledger can answer a repeated reserve once the done marker is gone.
local function record_usage(rid, outcome, late, reserved, actual, charged, plans, at_reserve, model, parts,
                            deadline)
  local plan_text = encode_plans(plans)
  local gen = state_string('gen') or ''
  local deadline_text = deadline and fmt(deadline) or ''
  -- Capped far above what a drain running every second leaves (a Postgres outage of hours
  -- at thousands of settles a second); settles are also kept by the instances that made them.
  redis.call('XADD', KEYS[7], 'MAXLEN', '~', '1000000', '*', 'rid', rid, 'outcome', outcome, 'late', late and '1' or '0',
    'reserved', fmt(reserved), 'actual', actual and fmt(actual) or '', 'charged', charged,
    'plans', plan_text, 'reserved_at', fmt(at_reserve), 'at', fmt(NOW), 'gen', gen,
    'model', model or '', 'parts', parts or '', 'deadline', deadline_text)
  return {plan_text, fmt(at_reserve), fmt(NOW), gen, model or '', parts or '', deadline_text}
end

-- Closes an open reservation (meta may be nil for a release of an unpublished tenant's
-- reservation): returns its reserved amounts, charges `actual` (nil for a
-- release) to the buckets that reserved, in their order, and any excess by charge_now;
-- removes the ledger entry and the lease; leaves the request's done marker.
-- Appends the usage record. Returns the charged parts (encoded), the overdraft beyond the
-- reservation and the record's fields (see record_usage).
local function finish(meta, rid, entry, actual, state)
  local parts = decode_parts(entry.parts)
  for _, p in ipairs(parts) do
    local field = reserved_field(p[1], entry.period)
    if hincr(KEYS[2], field, -p[2]) <= 0 then hdrop(KEYS[2], field) end
  end
  local charged = {}
  local plans = {}
  local excess = 0
  if actual then
    local due = actual
    for _, p in ipairs(parts) do
      local c = math.min(p[2], due)
      if c > 0 then
        charge(p[1], entry.period, c, plans)
        add_part(charged, p[1], c)
        due = due - c
      end
    end
    excess = due
    for _, p in ipairs(charge_now(meta, due, plans)) do add_part(charged, p[1], p[2]) end
  end
  redis.call('HDEL', KEYS[3], rid)
  lease_remove(rid)
  local encoded = encode_parts(charged)
  write_done(meta, rid, state, entry.amount, entry.deadline, entry.parts, actual, encoded)
  -- A plan charge to the previous period may have written its hash first.
  if plans[ARGV[2]] then touch_previous(meta) end
  -- An overdraft may have written the current period's hash first: give it its expiry.
  if meta then touch_period(meta) end
  local record = record_usage(rid, state, false, entry.amount, actual, encoded, plans,
    reserved_at(meta, entry.deadline), entry.model, entry.parts, entry.deadline)
  return encoded, excess, record
end

-- Settles a request whose reservation the sweeper returned (done: its amount, deadline
-- and parts): the use happened, so it is charged now, late. Returns settle_quota's reply.
local function settle_after_expiry(meta, rid, done, actual)
  local plans = {}
  local charged = encode_parts(charge_now(meta, actual, plans))
  write_done(meta, rid, 'settled', done.amount, done.deadline, done.parts, actual, charged)
  touch_period(meta)
  local over = actual - done.amount
  if over < 0 then over = 0 end
  local r = record_usage(rid, 'settled', true, done.amount, actual, charged, plans,
    reserved_at(meta, done.deadline), '', done.parts, done.deadline)
  return {'settled', meta.version, done.amount, actual, over, charged, 1, r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
end

-- Starts a call: its keys and arguments, the clock and the period, and empty per-call
-- caches (a call that failed part-way leaves nothing behind for the next).
-- The day (days since the epoch) PERIOD, DAY, PERIOD_START and PERIOD_END were computed
-- for: they depend on the day alone, so a call on the same day as the one before reuses them.
local CALENDAR_DAY

local function begin(keys, args)
  KEYS, ARGV = keys, args
  NOW = now_ms()
  local day = math.floor(NOW / 86400000)
  if day ~= CALENDAR_DAY then
    local y, m, d = civil(day)
    PERIOD = string.format('%04d-%02d', y, m)
    DAY = string.format('%04d-%02d-%02d', y, m, d)
    PERIOD_START = days_from_civil(y, m, 1) * 86400000
    if m == 12 then y, m = y + 1, 1 else m = m + 1 end
    PERIOD_END = days_from_civil(y, m, 1) * 86400000
    CALENDAR_DAY = day
  end
  CACHE, EXPIRE_AT = {}, {}
  LEASE_COUNT, STATE_STRINGS, STATE_READ = nil, {}, false
end

-- Ends a call (after flush()): what it read and cached is garbage now, not kept alive by
-- the library until the next call.
local function end_call()
  KEYS, ARGV, CACHE, EXPIRE_AT, STATE_STRINGS = nil, nil, nil, nil, nil
end
