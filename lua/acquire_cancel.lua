-- Settle an acquire request whose replies were all lost: did it take a hold?
--
-- KEYS[1]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  latch TTL in milliseconds
--
-- Replies {left, granted} when the request was granted (its latch holds
-- `1` or a fencing token): the caller gives that hold back. `left` is the
-- latch's remaining TTL in milliseconds (0 or more): a grant writes its
-- latch once, with the request's latch TTL, so the grant is that TTL less
-- `left` old, which the caller maps onto its own clock. `granted` is when
-- the grant ran by the server's clock, in ms since the Unix epoch (its
-- latch's write, a ms or two after the TTL it set): two grants of one
-- owner compare to that, free of network delays. Otherwise replies
-- {-1, 0}, and marks the latch `x` (cancelled) so that the request, should
-- it still reach Redis, changes nothing.
local latch = redis.call('get', KEYS[1])
if latch == false then
    redis.call('set', KEYS[1], 'x', 'px', ARGV[1])
    return {-1, 0}
end
if latch == 'x' then
    return {-1, 0}
end
-- shared: when the grant ran ({left, granted} of a latch that shows one)
local left = math.max(redis.call('pttl', KEYS[1]), 0)
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return {left, now_ms - (tonumber(ARGV[1]) - left)}
-- end shared
