-- Take permits from a semaphore (Redisson RSemaphore layout).
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- ARGV[1]  how many permits to take, at least 1
--
-- Replies 1 when they were taken, 0 when fewer are available (a missing
-- key counts as no permits). A value that is not an integer is an error.
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
    return 1
end
return 0
