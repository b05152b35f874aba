-- Delete a count-down latch whatever its count, opening it for every
-- waiter.
--
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  the message that opens it, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Replies 1 when there was a latch (and publishes), 0 when there was none.
if redis.call('del', KEYS[1]) == 0 then
    return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
