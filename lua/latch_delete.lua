-- Delete a count-down latch whatever its count, opening it for every
-- waiter.
--
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  the message that opens it, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Replies 1 when there was a latch (and publishes), 0 when there was none.
-- A key of another type, or a string that is no integer, is left alone and
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
if redis.call('del', KEYS[1]) == 0 then
    return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
