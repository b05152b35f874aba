-- The bench's baseline release: what Redisson's release of a reentrant
-- lock does on the same layout, with its unlock latch or (KEYS[3] absent)
-- none at all. Not used by the library.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- KEYS[3]  optional: the unlock latch, `redisson_unlock_latch:{name}:<id>`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  lease in milliseconds: the TTL the key gets when holds remain
-- ARGV[3]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[4]  with KEYS[3]: the latch's TTL in milliseconds
--
-- Replies 1 when this was the last hold (the key deleted, the message
-- published), 0 when holds remain (count lowered, TTL set to the lease),
-- nil when the owner holds nothing. With a latch, the reply is written to
-- it, and a call that finds it replies what it says, changing nothing.
local latch = KEYS[3]
if latch ~= nil then
    local first = redis.call('get', latch)
    if first ~= false then
        return tonumber(first)
    end
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local reply = 1
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    reply = 0
else
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
end
if latch ~= nil then
    redis.call('set', latch, reply, 'px', ARGV[4])
end
return reply
