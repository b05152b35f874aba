-- Count a count-down latch down by one (Redisson RCountDownLatch layout).
--
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, `redisson_countdownlatch__channel__{name}`
-- ARGV[1]  the message that opens it, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Reaching zero deletes the key and publishes the message; a latch that is
-- already open (no key) stays open and publishes nothing. Replies the count
-- left, 0 when open. A key of another type, or a string that is no
-- integer, is left alone and fails with `WRONGTYPE holds a <type>: <key>`.
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
if count == false then
    return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
if left < 0 then
    return 0
end
return left
