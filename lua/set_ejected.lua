-- set_ejected.lua: ejects or restores one member of a pool.
-- KEYS[1] ejected set   KEYS[2] state hash
-- ARGV[1] "eject" or "restore"   ARGV[2] the member
-- Returns the ejected members after the change.
-- Guarantees: the set and the state's `ejected` count (which lets draws skip the set
-- lookup while nothing is ejected) change together.
if ARGV[1] == 'eject' then
  redis.call('SADD', KEYS[1], ARGV[2])
else
  redis.call('SREM', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[2], 'ejected', redis.call('SCARD', KEYS[1]))
return redis.call('SMEMBERS', KEYS[1])
