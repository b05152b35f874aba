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
-- nothing and replies 0. A value that is not an integer is an error.
local latch = redis.call('get', KEYS[2])
if latch == 'x' then
    return 0
end
if latch == '1' then
    return 1
end
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
local available = tonumber(value)
if available == nil then
    return redis.error_reply('ERR the semaphore holds a value that is not an integer')
end
if available >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 1, 'px', ARGV[2])
    return 1
end
return 0
