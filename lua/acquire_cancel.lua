-- Settle an acquire request whose replies were all lost: did it take a hold?
--
-- KEYS[1]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  latch TTL in milliseconds
--
-- Replies 1 when the request was granted (its latch holds `1` or a fencing
-- token): the caller gives that hold back. Otherwise replies 0, and marks the
-- latch `x` (cancelled) so that the request, should it still reach Redis,
-- changes nothing.
local latch = redis.call('get', KEYS[1])
if latch == false then
    redis.call('set', KEYS[1], 'x', 'px', ARGV[1])
    return 0
end
if latch == 'x' then
    return 0
end
return 1
