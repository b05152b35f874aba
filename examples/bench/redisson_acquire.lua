-- The bench's baseline acquire: what Redisson's acquire of a reentrant
-- lock does on the same layout, and nothing more (no latch, no check of
-- the key's type, no deadline). Not used by the library.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
--
-- Replies nil when the owner now holds the lock (its count raised by one,
-- the key's TTL set to the lease); otherwise the key's PTTL in
-- milliseconds, and nothing changes.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
