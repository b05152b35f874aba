-- Delete a fair lock whoever holds it, and wake the first waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue list, `redisson_lock_queue:{name}`
-- KEYS[3]  the timeout sorted set, `redisson_lock_timeout:{name}`
-- KEYS[4]  the channel prefix, `redisson_lock__channel:{name}`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  the publish command
--
-- Replies 1 when the lock existed (deleted, first live waiter woken on its
-- own channel), else 0. A lock key that is no lock hash (another type, or
-- a hash with other fields), a queue that is no list or a timeout set that
-- is no sorted set is left alone and fails with
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
-- shared: refuse another type (nil when `key` is missing or holds a
-- `want`; else the error reply `WRONGTYPE holds a <type>: <key>`)
local function wrong_type(key, want)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' or kind == want then
        return nil
    end
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. key)
end
-- end shared
local refused = not_a_lock(KEYS[1]) or wrong_type(KEYS[2], 'list')
    or wrong_type(KEYS[3], 'zset')
if refused then
    return refused
end
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
-- shared: purge dead waiters (the server's time, then every queue head
-- whose timeout has passed, or that has none, leaves the line)
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false then
        break
    end
    local score = tonumber(redis.call('zscore', KEYS[3], head))
    if score ~= nil and score > now then
        break
    end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
end
-- end shared
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then
    redis.call(ARGV[2], KEYS[4] .. ':' .. next, ARGV[1])
end
return 1
