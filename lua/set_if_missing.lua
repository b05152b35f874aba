-- Set a semaphore's permits or a latch's count once, and tell the waiters.
--
-- KEYS[1]  the semaphore or latch key
-- KEYS[2]  its channel
-- ARGV[1]  the value to set
-- ARGV[2]  the message to publish: the permits for a semaphore, `1` for a
--          latch
-- ARGV[3]  the publish command, `publish` or `spublish`
-- ARGV[4]  the key's TTL in milliseconds; `0` or absent for none
--          (Redisson's trySetPermits(permits, timeToLive))
--
-- Replies 1 when the key was set, 0 when it already existed (untouched). A
-- key of another type, or a string that is no integer, is left alone and
-- fails with `WRONGTYPE holds a <type>: <key>`.
-- shared: read a count (the integer a string `key` holds; false when the
-- key is missing; else, another type or a string that is no integer, the
-- error reply `WRONGTYPE holds a <type>: <key>`)
local function count_of(key)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' then
        return false
    end
    if kind == 'string' then
        local value = redis.call('get', key)
        if string.find(value, '^%-?%d+$') then
            return tonumber(value)
        end
    end
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. key)
end
-- end shared
local count = count_of(KEYS[1])
if type(count) == 'table' then
    return count
end
if count ~= false then
    return 0
end
local ttl = tonumber(ARGV[4] or '0')
if ttl > 0 then
    redis.call('set', KEYS[1], ARGV[1], 'px', ttl)
else
    redis.call('set', KEYS[1], ARGV[1])
end
redis.call(ARGV[3], KEYS[2], ARGV[2])
return 1
