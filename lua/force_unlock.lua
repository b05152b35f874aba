-- Delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Replies 1 when the lock existed (deleted, message published), else 0.
-- A key of another type is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. KEYS[1])
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
