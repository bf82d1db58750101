-- publish_pool.lua: installs a pool's snapshot into its meta hash, only when it is newer,
-- and keeps the copies the draw script reads from the state hash in step.
-- KEYS[1] meta hash   KEYS[2] state hash
-- ARGV[1] the snapshot version (integer >= 1)   ARGV[2] low-water   ARGV[3] "1" when any
-- member has a daily cap, else "0"   ARGV[4] kind ("channels"|"tiers")
-- ARGV[5..] meta field, value, field, value, ...
-- Returns {1, version} when written; {0, current_version} when the stored one is as new or
-- newer (nothing written).
-- Guarantees: the meta fields, the version and the draw's copies change together; fields
-- absent from the new snapshot disappear; an older snapshot never overwrites a newer one.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local version = tonumber(ARGV[1])
if current >= version then return {0, current} end
redis.call('DEL', KEYS[1])
local fields = {'version', ARGV[1]}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HSET', KEYS[2], 'version', ARGV[1], 'low_water', ARGV[2], 'capped', ARGV[3], 'kind', ARGV[4])
return {1, version}
