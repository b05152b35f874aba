-- Take permits from a semaphore (Redisson RSemaphore layout).
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  how many permits to take, at least 1
-- ARGV[2]  latch TTL in milliseconds
--
-- Replies 1 when they were taken (and writes the latch, so that a request
-- whose reply was lost can be settled, see acquire_cancel.lua), 0 when
-- fewer are available (a missing key counts as no permits). A resend of a
-- request already granted (latch `1`) takes nothing more and replies 1. A
-- request given up by its client (latch `x`) that reaches Redis late takes
-- nothing and replies 0. A key of another type, or a string that is no
-- integer, fails with `WRONGTYPE holds a <type>: <key>` and changes nothing.
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
local latch = redis.call('get', KEYS[2])
if latch == 'x' then
    return 0
end
if latch == '1' then
    return 1
end
local available = count_of(KEYS[1])
if type(available) == 'table' then
    return available
end
if available ~= false and available >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 1, 'px', ARGV[2])
    return 1
end
return 0
