-- publish_tenant.lua: installs a tenant's quota snapshot, only when it is newer, and first
-- makes sure the tenant's counters are this Redis's own or restored from the usage ledger.
-- KEYS[1] meta hash   KEYS[2] state hash   KEYS[3] current period hash
-- KEYS[4] previous period hash
-- ARGV[1] the snapshot version (integer >= 1)
-- ARGV[2] a new generation id (used when the counters are adopted or restored)
-- ARGV[3] the restore, JSON, or "" when none was computed:
--         {"upto": last ledger row id, "state": {"u:<grant>": used, ...},
--          "current": {"plan_used": n, "req:<day>": n}, "previous": {"plan_used": n},
--          "current_expires_ms": ms, "previous_expires_ms": ms,  (the period hashes' expiry)
--          "at": ms}  (now, by the caller's clock)
-- ARGV[4..] field, value, field, value, ... of the snapshot
-- Returns {"restore"} when the tenant has no counters here at all (a new tenant, or a
-- Redis that restarted empty) and no restore was given: nothing is written, the caller
-- reads the ledger and calls again with it. Otherwise {1, version} when the snapshot was
-- written, {0, current_version} when the stored one is as new or newer.
-- A restore also records when it happened (restored_at): for a reservation's TTL after
-- it, a settle of a request id with no trace is charged (its reservation was lost).
-- Guarantees: a tenant's meta never appears before its counters are restored, so no
-- request is admitted against counters reset to zero; counters that exist (written by
-- this Redis before there was a ledger) are adopted, never overwritten; the snapshot's
-- fields change together and an older snapshot never overwrites a newer one.
if not redis.call('HGET', KEYS[2], 'gen') then
  local has_counters = redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1
    or redis.call('EXISTS', KEYS[4]) == 1
  if has_counters then
    -- Counters from before the ledger: the ledger has no opening balance for them, so the
    -- compensation leaves them alone, and records counted before (generation '') are theirs.
    redis.call('HSET', KEYS[2], 'gen', ARGV[2], 'restored_upto', '0', 'adopted', '1')
  elseif ARGV[3] == '' then
    return {'restore'}
  else
    local r = cjson.decode(ARGV[3])
    for field, value in pairs(r.state or {}) do
      redis.call('HSET', KEYS[2], field, string.format('%.0f', value))
    end
    for field, value in pairs(r.current or {}) do
      redis.call('HSET', KEYS[3], field, string.format('%.0f', value))
    end
    for field, value in pairs(r.previous or {}) do
      redis.call('HSET', KEYS[4], field, string.format('%.0f', value))
    end
    if r.current_expires_ms and redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('PEXPIREAT', KEYS[3], string.format('%.0f', r.current_expires_ms))
    end
    if r.previous_expires_ms and redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('PEXPIREAT', KEYS[4], string.format('%.0f', r.previous_expires_ms))
    end
    -- legacy_until 1: no done marker of the form before windows can exist for these counters.
    redis.call('HSET', KEYS[2], 'gen', ARGV[2], 'restored_upto', string.format('%.0f', r.upto or 0),
      'legacy_until', '1')
    -- Only a ledger with rows means Redis lost something (a new tenant has none).
    if (r.upto or 0) > 0 and r.at then
      redis.call('HSET', KEYS[2], 'restored_at', string.format('%.0f', r.at))
    end
  end
end
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local version = tonumber(ARGV[1])
if current >= version then return {0, current} end
redis.call('DEL', KEYS[1])
local fields = {'version', ARGV[1]}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
return {1, version}
