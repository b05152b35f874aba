-- Read what a lock holds, in one call, without changing anything (every
-- lock kind, Redisson's layout; locks taken by any Redisson-layout client).
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  fair locks: the queue list, `redisson_lock_queue:{name}`;
--          fenced locks: the token counter, `redisson_lock_token:{name}`
-- KEYS[3]  fair locks: the timeout sorted set, `redisson_lock_timeout:{name}`
-- ARGV[1]  what KEYS[2..] are: `plain` (none), `fair` or `fenced`
--
-- Replies an array of six:
--   1. the hash's fields and values, flat (HGETALL)
--   2. the hash's PTTL in ms (-2 when it does not exist, -1 without a TTL)
--   3. fair: the queue, oldest first; otherwise empty
--   4. fair: the timeout set's members and scores, flat; otherwise empty
--   5. the server's time in epoch ms
--   6. fenced: the token counter, -1 when it was never drawn; otherwise -1
-- A lock key that is no lock hash (another type, or a hash with other
-- fields), a queue that is no list, a timeout set that is no sorted set or
-- a token counter that is no integer fails with
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
local refused = not_a_lock(KEYS[1])
if ARGV[1] == 'fair' then
    refused = refused or wrong_type(KEYS[2], 'list') or wrong_type(KEYS[3], 'zset')
end
if refused then
    return refused
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local hash = redis.call('hgetall', KEYS[1])
local pttl = redis.call('pttl', KEYS[1])
local queue = {}
local scores = {}
local token = -1
if ARGV[1] == 'fair' then
    queue = redis.call('lrange', KEYS[2], 0, -1)
    scores = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
elseif ARGV[1] == 'fenced' then
    local counter = count_of(KEYS[2])
    if type(counter) == 'table' then
        return counter
    end
    if counter ~= false then
        token = counter
    end
end
return {hash, pttl, queue, scores, now, token}
