-- Every operation on a permit-expirable semaphore (Redisson
-- RPermitExpirableSemaphore layout), picked by ARGV[1].
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  the permits handed out, `{name}:timeout`: a sorted set whose
--          members are permit ids (16 raw bytes) scored by the epoch ms at
--          which the permit expires (ARGV[5] for a permit without a lease)
-- KEYS[3]  the channel, `redisson_sc:{name}`
-- KEYS[4]  acquire only: the acquire latch,
--          `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  the operation: acquire, release, update, lease, available,
--          out, total, set or drain
-- ARGV[2]  the publish command, `publish` or `spublish`
-- ARGV[3]  the permit ids, 16 raw bytes each, concatenated (acquire,
--          release: one or more; update, lease: one)
-- ARGV[4]  the lease in ms, 0 for none (acquire, update); the total (set)
-- ARGV[5]  the score of a permit without a lease
-- ARGV[6]  acquire only: the latch TTL in milliseconds
-- ARGV[7]  acquire only: the call's deadline, epoch ms by the server's
--          clock (absent or 0: none); run later, an acquire changes
--          nothing and replies -5 (its client gave up on the reply, and
--          may have exited since: a grant nobody would own is never made)
--
-- First, by the server's clock, every permit whose lease ended goes back:
-- removed from KEYS[2], added to KEYS[1], and the new count published.
-- Then:
--   acquire    takes one permit per id, all or none: replies nil when taken
--              (and writes the latch, so that a request whose reply was
--              lost can be settled, see acquire_cancel.lua); otherwise how
--              many ms until the first lease ends (at least 1), or -1 when
--              no permit out has a lease or the request was given up by its
--              client (latch `x`). A resend of a request already granted
--              (latch `1`) takes nothing more: nil while all its permits
--              are out, -1 once one is not (it expired)
--   release    gives every permit back, all or none: replies 1, or -i when
--              the i-th id is not out (it expired, or was released
--              already), and then gives back none
--   update     sets the permit's lease from now: replies 1, or 0 when it
--              is not out
--   lease      replies the ms left of the permit's lease (by the server's
--              clock), -1 when it has none, -2 when it is not out
--   available  replies the available permits
--   out        replies how many permits are out
--   total      replies available plus out
--   set        makes the total ARGV[4] (the available count becomes that
--              less the permits out, perhaps below zero), publishes the new
--              available count, and replies it
--   drain      takes every available permit: replies how many
--
-- A semaphore key of another type (or a string that is no integer), or a
-- KEYS[2] that is no sorted set, is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`, whatever the operation.
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
local refused = wrong_type(KEYS[2], 'zset')
if refused then
    return refused
end
refused = count_of(KEYS[1])
if type(refused) == 'table' then
    return refused
end

local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local forever = tonumber(ARGV[5])

-- The available permits (checked above: a missing key or an integer).
local function available()
    local value = redis.call('get', KEYS[1])
    if value == false then
        return 0
    end
    return tonumber(value)
end

local expired = redis.call('zremrangebyscore', KEYS[2], '-inf', now)
if expired > 0 then
    local value = redis.call('incrby', KEYS[1], expired)
    redis.call(ARGV[2], KEYS[3], value)
end

local function permit_ids()
    local ids = {}
    for i = 1, #ARGV[3], 16 do
        ids[#ids + 1] = string.sub(ARGV[3], i, i + 15)
    end
    return ids
end

local function expiry()
    local lease = tonumber(ARGV[4])
    if lease > 0 then
        return now + lease
    end
    return forever
end

-- shared: too late (whether the server's clock is past `deadline`, the
-- epoch ms by the server's clock at which the client that sent this call
-- gives up on its reply; never when `deadline` is absent or 0)
local function too_late(deadline)
    deadline = tonumber(deadline)
    if deadline == nil or deadline <= 0 then
        return false
    end
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > deadline
end
-- end shared
local op = ARGV[1]
if op == 'acquire' then
    if too_late(ARGV[7]) then
        return -5
    end
    local latch = redis.call('get', KEYS[4])
    if latch == 'x' then
        return -1
    end
    local ids = permit_ids()
    if latch == '1' then
        for _, id in ipairs(ids) do
            if redis.call('zscore', KEYS[2], id) == false then
                return -1
            end
        end
        return nil
    end
    local n = available()
    if n >= #ids then
        redis.call('decrby', KEYS[1], #ids)
        local at = expiry()
        for _, id in ipairs(ids) do
            redis.call('zadd', KEYS[2], at, id)
        end
        redis.call('set', KEYS[4], 1, 'px', ARGV[6])
        return nil
    end
    local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if first[2] == nil or tonumber(first[2]) >= forever then
        return -1
    end
    return math.max(tonumber(first[2]) - now, 1)
elseif op == 'release' then
    local ids = permit_ids()
    for i, id in ipairs(ids) do
        if redis.call('zscore', KEYS[2], id) == false then
            return -i
        end
    end
    for _, id in ipairs(ids) do
        redis.call('zrem', KEYS[2], id)
    end
    local value = redis.call('incrby', KEYS[1], #ids)
    redis.call(ARGV[2], KEYS[3], value)
    return 1
elseif op == 'update' then
    if redis.call('zscore', KEYS[2], ARGV[3]) == false then
        return 0
    end
    redis.call('zadd', KEYS[2], expiry(), ARGV[3])
    return 1
elseif op == 'lease' then
    local score = redis.call('zscore', KEYS[2], ARGV[3])
    if score == false then
        return -2
    end
    if tonumber(score) >= forever then
        return -1
    end
    return math.max(tonumber(score) - now, 0)
elseif op == 'available' then
    return available()
elseif op == 'out' then
    return redis.call('zcard', KEYS[2])
elseif op == 'total' then
    return available() + redis.call('zcard', KEYS[2])
elseif op == 'set' then
    local value = tonumber(ARGV[4]) - redis.call('zcard', KEYS[2])
    redis.call('set', KEYS[1], value)
    redis.call(ARGV[2], KEYS[3], value)
    return value
elseif op == 'drain' then
    local n = available()
    if n <= 0 then
        return 0
    end
    redis.call('decrby', KEYS[1], n)
    return n
end
return redis.error_reply('ERR unknown operation ' .. tostring(op))
