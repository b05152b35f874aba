-- Read a semaphore's available permits or a latch's count, changing
-- nothing.
--
-- KEYS[1]  the semaphore or latch: a string holding the count
--
-- Replies the count; 0 when the key is missing (a semaphore never set, an
-- open latch). A key of another type, or a string that is no integer,
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
return count or 0
