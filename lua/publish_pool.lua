-- publish_pool.lua: installs a pool's snapshot into its meta hash, only when it is newer,
-- and keeps the copies the draw script reads from the state hash in step.
-- KEYS[1] meta hash   KEYS[2] state hash   KEYS[3] ejected set
-- KEYS[2+2i], KEYS[3+2i] the list and standby batch of the i-th tier in ARGV's dead tiers
-- ARGV[1] the snapshot version (integer >= 1)   ARGV[2] low-water   ARGV[3] "1" when any
-- member has a daily cap, else "0"   ARGV[4] kind ("channels"|"tiers")
-- ARGV[5] the short cap window's length in ms ("0": no window caps)
-- ARGV[6] "1" when draws go to the pool's draw log, else "0"
-- ARGV[7] n, the number of ejected members; ARGV[8 .. 7+n] those members
-- ARGV[8+n] d, the number of dead tiers (a `tiers` pool's tiers with no channel left to
-- draw: every channel with a weight ejected, or none at all); ARGV[9+n .. 8+n+d] the
-- state fields of their batch sequences ("seq:U"), in the order of their KEYS
-- ARGV[9+n+d ..] meta field, value, field, value, ...
-- Returns {1, version} when written; {0, current_version} when the stored one is as new or
-- newer (nothing written).
-- Guarantees: the meta fields, the version, the ejected members and the draw's copies
-- change together; fields absent from the new snapshot disappear; an older snapshot never
-- overwrites a newer one. In the same step, each dead tier's list and standby batch are
-- dropped and its sequence moved on (a batch built before is refused as stale): draws map
-- its tickets to another tier at once instead of skipping its ejected channels' tickets.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local version = tonumber(ARGV[1])
if current >= version then return {0, current} end
redis.call('DEL', KEYS[1])
local fields = {'version', ARGV[1]}
local ejected = tonumber(ARGV[7])
local dead = tonumber(ARGV[8 + ejected])
for i = 9 + ejected + dead, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('DEL', KEYS[3])
if ejected > 0 then redis.call('SADD', KEYS[3], unpack(ARGV, 8, 7 + ejected)) end
redis.call('HSET', KEYS[2], 'version', ARGV[1], 'low_water', ARGV[2], 'capped', ARGV[3], 'kind', ARGV[4],
  'ejected', ejected, 'wlen', ARGV[5], 'drawlog', ARGV[6])
for i = 1, dead do
  redis.call('UNLINK', KEYS[2 + 2 * i], KEYS[3 + 2 * i])
  redis.call('HINCRBY', KEYS[2], ARGV[8 + ejected + i], 1)
end
return {1, version}
