-- Delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Replies 1 when the lock existed (deleted, message published), else 0.
-- A key that is no lock hash (another type, or a hash with other fields:
-- someone else's data under the name) is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
-- shared: refuse what is no lock (nil when `key` is missing or holds a lock
-- hash; else the error reply `WRONGTYPE holds a <type>: <key>`. A lock
-- hash's fields are `mode` and owner fields, `<client>:<owner>`, whose
-- values are counts. One HSCAN page is read: all of a small hash, a
-- bounded part of a big one)
local function not_a_lock(key)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' then
        return nil
    end
    if kind == 'hash' then
        local page = redis.call('hscan', key, 0, 'count', 100)[2]
        for i = 1, #page, 2 do
            local field, value = page[i], page[i + 1]
            if field ~= 'mode'
                and not (string.find(field, ':', 1, true) and string.find(value, '^%d+$')) then
                return redis.error_reply('WRONGTYPE holds a hash: ' .. key)
            end
        end
        return nil
    end
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. key)
end
-- end shared
local refused = not_a_lock(KEYS[1])
if refused then
    return refused
end
if redis.call('del', KEYS[1]) == 0 then
    return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
