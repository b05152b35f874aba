-- Delete a semaphore, its permits with it.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
--
-- Replies 1 when it existed (deleted), 0 when it did not. Nothing is
-- published: waiters go on waiting, as a semaphore that is not set has no
-- permits. A key of another type, or a string that is no integer, is left
-- alone and fails with `WRONGTYPE holds a <type>: <key>`.
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
return redis.call('del', KEYS[1])
