-- publish_route.lua: installs a route's snapshot into its meta hash, only when it is newer.
-- KEYS[1] meta hash of the route
-- ARGV[1] the snapshot version (integer >= 1)   ARGV[2] the snapshot (JSON: rules,
--         default_pool, version)
-- Returns {1, version} when written; {0, current_version} when the stored one is as new or
-- newer (nothing written).
-- Guarantees: the version and the rules change together, in one step; an older snapshot
-- never overwrites a newer one.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local version = tonumber(ARGV[1])
if current >= version then return {0, current} end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'snapshot', ARGV[2])
return {1, version}
