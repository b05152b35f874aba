-- Release one hold of a reentrant lock, idempotently per request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- KEYS[3]  the unlock latch, `redisson_unlock_latch:{name}:<request-id>`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  lease in milliseconds, applied when holds remain
-- ARGV[3]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[4]  the publish command, `publish` or `spublish`
-- ARGV[5]  latch TTL in milliseconds
--
-- Replies 1 when this was the last hold (the key is deleted and the message
-- published), 0 when holds remain (count lowered, TTL reset to the lease),
-- nil when the owner holds nothing. A retry with the same request id replies
-- what the first call replied, without releasing again.
local unlock_latch = KEYS[3]
-- shared: replay a finished release
local done = redis.call('get', unlock_latch)
if done ~= false then
    return tonumber(done)
end
-- end shared
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    return nil
end
-- shared: drop one hold (`held`, the owner's count, read before: with holds
-- left, the count is lowered, the lease reset and 0 replied; on the last
-- hold the script goes on, and removes the owner's field or the whole hash.
-- A count of exactly 1, the common case, is not lowered first; any other
-- value goes through HINCRBY, which refuses what is not an integer)
if held ~= '1' and redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', unlock_latch, 0, 'px', ARGV[5])
    return 0
end
-- end shared
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', unlock_latch, 1, 'px', ARGV[5])
return 1
