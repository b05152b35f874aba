-- Acquire, or re-enter, a fenced lock: the reentrant lock plus a token,
-- safely resent per request id.
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  the token counter, `redisson_lock_token:{name}` (no TTL: tokens
--          rise forever)
-- KEYS[3]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  latch TTL in milliseconds (at least the lease)
--
-- Replies {1, token} when the owner now holds the lock: the hold count was
-- raised by one, the key's TTL set to the lease, the counter raised by one
-- (re-entry included) and the latch set to the token, the counter's new
-- value. Otherwise replies {0, pttl} (pttl -1 when the key has no TTL) and
-- changes nothing. A resend of a granted request (its latch exists and the
-- owner still holds the lock) replies {1, token} with the first call's token,
-- changing nothing. A request given up by its client (latch `x`, see
-- acquire_cancel.lua) that reaches Redis late changes nothing and replies
-- {0, -2}.
-- A key of another type fails with WRONGTYPE and changes nothing.
local granted = redis.call('get', KEYS[3])
if granted == 'x' then
    return {0, -2}
end
if granted ~= false and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return {1, tonumber(granted)}
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- The token first: a counter that is not a number fails the call
    -- before anything is written (a script's writes are not rolled back).
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], token, 'px', ARGV[3])
    return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
