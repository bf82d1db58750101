-- set_ejected.lua: ejects or restores one member of a pool.
-- KEYS[1] ejected set   KEYS[2] state hash
-- KEYS[3] list, KEYS[4] standby batch of the member's tier (a `tiers` pool; absent otherwise)
-- ARGV[1] "eject" or "restore"   ARGV[2] the member
-- ARGV[3] (with KEYS[3]) the state field of that tier's batch sequence ("seq:G")
-- ARGV[4..] (with KEYS[3]) the tier's channels that have a weight
-- Returns the ejected members after the change.
-- Guarantees: the set and the state's `ejected` count (which lets draws skip the set
-- lookup while nothing is ejected) change together. An ejection that leaves the member's
-- tier no channel to draw drops the tier's list and standby batch in the same step and
-- moves the tier's sequence on (a batch built before the ejection is then refused as
-- stale): draws map the tier's tickets to another tier at once, as for a tier with no
-- channel, instead of skipping the ejected channel's tickets.
if ARGV[1] == 'eject' then
  redis.call('SADD', KEYS[1], ARGV[2])
  if KEYS[3] then
    local left = false
    for i = 4, #ARGV do
      if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then
        left = true
        break
      end
    end
    if not left then
      redis.call('UNLINK', KEYS[3], KEYS[4])
      redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
    end
  end
else
  redis.call('SREM', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[2], 'ejected', redis.call('SCARD', KEYS[1]))
return redis.call('SMEMBERS', KEYS[1])
