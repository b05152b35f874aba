-- Acquire, or re-enter, a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock hash, at the plain lock name
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
--
-- Replies nil when the owner now holds the lock: the hold count was raised by
-- one and the key's TTL set to the lease. Otherwise replies the key's PTTL in
-- milliseconds (-1 when the key has no TTL), and changes nothing.
-- A key of another type fails with WRONGTYPE and changes nothing.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
