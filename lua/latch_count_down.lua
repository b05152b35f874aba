-- Count a count-down latch down by one (Redisson RCountDownLatch layout).
--
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  the message that opens it, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Reaching zero deletes the key and publishes the message; a latch that is
-- already open (no key) stays open and publishes nothing. Replies the count
-- left, 0 when open.
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
if left < 0 then
    return 0
end
return left
