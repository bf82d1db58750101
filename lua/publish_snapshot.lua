-- publish_snapshot.lua: installs a published snapshot (a tenant's quota, a pool's
-- configuration) into its meta hash, only when it is newer.
-- KEYS[1] the meta hash
-- ARGV[1] the snapshot version (integer >= 1); ARGV[2..] field, value, field, value, ...
-- Returns {1, version} when written; {0, current_version} when the stored one is as new
-- or newer (nothing written).
-- Guarantees: every field and the version change together; fields absent from the new
-- snapshot disappear; an older snapshot never overwrites a newer one.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local version = tonumber(ARGV[1])
if current >= version then return {0, current} end
redis.call('DEL', KEYS[1])
local fields = {'version', ARGV[1]}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
return {1, version}
