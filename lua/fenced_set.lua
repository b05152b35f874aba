-- Write one field of a hash only for a fencing token at least as high as
-- every token that wrote the hash before (a leader's term, a fenced
-- lock's token), so that a writer paused past its lease is refused once
-- a later one has written.
--
-- KEYS[1]  the data hash, the caller's key
-- KEYS[2]  its fence, `ferrisson_fence:{key}`: the highest token that
--          wrote the hash (a decimal integer, no TTL)
-- ARGV[1]  the writer's token, a positive integer below 2^53 (Lua's
--          numbers are doubles)
-- ARGV[2]  the field
-- ARGV[3]  the value
--
-- Replies {1, token} when the token is at least the fence: the field is
-- set and the fence raised to the token. Otherwise replies {0, fence}
-- and changes nothing. A data key that is no hash, or a fence that is no
-- integer below 2^53, fails with `WRONGTYPE holds a <type>: <key>` and
-- changes nothing.
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
local token = tonumber(ARGV[1])
if fence and fence > token then
    return {0, fence}
end
redis.call('set', KEYS[2], ARGV[1])
redis.call('hset', KEYS[1], ARGV[2], ARGV[3])
return {1, token}
