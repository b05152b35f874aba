-- Take every available permit of a semaphore.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
--
-- Replies how many were taken: 0 when none was available or the key is
-- missing. The key keeps its TTL, if it has one.
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
local available = tonumber(value)
if available == nil then
    return redis.error_reply('ERR the semaphore holds a value that is not an integer')
end
if available <= 0 then
    return 0
end
redis.call('decrby', KEYS[1], available)
return available
