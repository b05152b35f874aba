-- Settle an acquire request whose replies were all lost: did it take a hold?
--
-- KEYS[1]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  latch TTL in milliseconds
--
-- Replies the latch's remaining TTL in milliseconds (0 or more) when the
-- request was granted (its latch holds `1` or a fencing token): the caller
-- gives that hold back, and learns when it was taken, by the server's
-- clock: a grant writes its latch once, with the request's latch TTL, so
-- the grant is that TTL less the reply old. Otherwise replies -1, and marks
-- the latch `x` (cancelled) so that the request, should it still reach
-- Redis, changes nothing.
local latch = redis.call('get', KEYS[1])
if latch == false then
    redis.call('set', KEYS[1], 'x', 'px', ARGV[1])
    return -1
end
if latch == 'x' then
    return -1
end
return math.max(redis.call('pttl', KEYS[1]), 0)
