-- Take every available permit of a semaphore.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
--
-- Replies how many were taken: 0 when none was available or the key is
-- missing. The key keeps its TTL, if it has one. A key of another type, or
-- a string that is no integer, fails with `WRONGTYPE holds a <type>: <key>`
-- and changes nothing.
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
local available = count_of(KEYS[1])
if type(available) == 'table' then
    return available
end
if available == false or available <= 0 then
    return 0
end
redis.call('decrby', KEYS[1], available)
return available
