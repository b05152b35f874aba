-- Give permits to a semaphore (a release, or permits added or taken away),
-- and tell the waiters.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  its channel, `redisson_sc:{name}`
-- ARGV[1]  how many permits, non-zero; negative takes them away
--          (Redisson's addPermits(-n)), which may leave the count below zero
-- ARGV[2]  the publish command, `publish` or `spublish`
-- ARGV[3]  `1`: only if the semaphore exists (release-if-exists); `0` or
--          absent: a missing semaphore counts as 0 permits
--
-- Replies the new number of available permits, which is also the message
-- published; nil, with nothing written or published, when ARGV[3] is `1` and
-- the semaphore does not exist. The key's TTL, if it has one, is kept. A
-- key of another type, or a string that is no integer, fails with
-- `WRONGTYPE holds a <type>: <key>` and changes nothing.
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
if ARGV[3] == '1' and available == false then
    return nil
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
