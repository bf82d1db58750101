-- return_chunk.lua: gives back what is left of the chunk an instance holds (it stops, or
-- the tenant is no longer hot for it). See chunk_lib.lua.
-- A function of the quota library, after quota_lib.lua (KEYS[1..9] there).
-- ARGV[4] the holder
-- Returns {"returned", tokens} (0 when it held none); or {"period", actual}.
-- Guarantees: the chunk's tokens are available again at once, exactly once.
local mismatch = period_mismatch()
if mismatch then return mismatch end
local c = chunk_get(ARGV[4])
if not c then return {'returned', 0} end
return {'returned', chunk_return(ARGV[4], c)}
