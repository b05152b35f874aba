-- Read one field of a fenced hash and its fence, changing nothing.
--
-- KEYS[1]  the data hash
-- KEYS[2]  its fence, `ferrisson_fence:{key}`
-- ARGV[1]  the field
--
-- Replies {value or false, fence or -1}: the field's value (nil when the
-- hash or the field is missing) and the highest token that wrote the
-- hash (-1 when none has). A data key that is no hash, or a fence that
-- is no integer, fails with `WRONGTYPE holds a <type>: <key>`.
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
-- shared: read a fence (the highest token that wrote the hash `data`, as
-- kept at `fence`: false when none has; the error reply `WRONGTYPE holds
-- a <type>: <key>` when `data` is no hash or `fence` no integer below
-- 2^53: a double holds those exactly, and no larger one rounds below)
local function fence_of(data, fence)
    local kind = redis.call('type', data)['ok']
    if kind ~= 'none' and kind ~= 'hash' then
        return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. data)
    end
    local highest = count_of(fence)
    if type(highest) == 'number' and highest >= 9007199254740992 then
        return redis.error_reply('WRONGTYPE holds a string: ' .. fence)
    end
    return highest
end
-- end shared
local fence = fence_of(KEYS[1], KEYS[2])
if type(fence) == 'table' then
    return fence
end
return {redis.call('hget', KEYS[1], ARGV[1]), fence or -1}
