-- A waiter gives up on a fair lock: it leaves the queue, and the waiters
-- behind it move up (their scores lowered by the waiter timeout).
--
-- KEYS[1]  the queue list, `redisson_lock_queue:{name}`
-- KEYS[2]  the timeout sorted set, `redisson_lock_timeout:{name}`
-- KEYS[3]  the lock hash
-- KEYS[4]  the channel prefix, `redisson_lock__channel:{name}`
-- ARGV[1]  owner field
-- ARGV[2]  waiter timeout in milliseconds
-- ARGV[3]  the unlock message, `0`
-- ARGV[4]  the publish command
--
-- Replies 1 when the owner was queued, else 0. When the leaver was first
-- in line and the lock is free, the next waiter is woken, so that the
-- release that woke the leaver is not lost. A queue that is no list or a
-- timeout set that is no sorted set is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
-- shared: refuse another type (nil when `key` is missing or holds a
-- `want`; else the error reply `WRONGTYPE holds a <type>: <key>`)
local function wrong_type(key, want)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' or kind == want then
        return nil
    end
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. key)
end
-- end shared
local refused = wrong_type(KEYS[1], 'list') or wrong_type(KEYS[2], 'zset')
if refused then
    return refused
end
local queue = redis.call('lrange', KEYS[1], 0, -1)
local at = nil
for i, waiter in ipairs(queue) do
    if waiter == ARGV[1] then
        at = i
        break
    end
end
if at == nil then
    redis.call('zrem', KEYS[2], ARGV[1])
    return 0
end
for i = at + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
if at == 1 and redis.call('exists', KEYS[3]) == 0 and queue[2] ~= nil then
    redis.call(ARGV[4], KEYS[4] .. ':' .. queue[2], ARGV[3])
end
return 1
