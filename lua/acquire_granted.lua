-- When a granted acquire ran, read from its latch; changes nothing.
--
-- KEYS[1]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  latch TTL in milliseconds
--
-- Replies {left, granted} while the latch shows a grant (`1` or a fencing
-- token), as `acquire_cancel.lua` does: the latch's remaining TTL (ms),
-- and when the grant ran by the server's clock (ms since the Unix epoch;
-- the latch is written last in a grant's script, a ms or so after the
-- hash's TTL was set). Otherwise {-1, 0}: the latch is gone (deleted once
-- its request was spent) or cancelled, and nothing is written.
local latch = redis.call('get', KEYS[1])
if latch == false or latch == 'x' then
    return {-1, 0}
end
-- shared: when the grant ran ({left, granted} of a latch that shows one)
local left = math.max(redis.call('pttl', KEYS[1]), 0)
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return {left, now_ms - (tonumber(ARGV[1]) - left)}
-- end shared
