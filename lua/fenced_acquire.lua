-- Acquire, or re-enter, a fenced lock: the reentrant lock plus a token.
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  the token counter, `redisson_lock_token:{name}` (no TTL: tokens
--          rise forever)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
--
-- Replies {1, token} when the owner now holds the lock: the hold count was
-- raised by one, the key's TTL set to the lease, and the counter raised by
-- one (re-entry included); token is its new value. Otherwise replies
-- {0, pttl} (pttl -1 when the key has no TTL) and changes nothing.
-- A key of another type fails with WRONGTYPE and changes nothing.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[2])}
end
return {0, redis.call('pttl', KEYS[1])}
