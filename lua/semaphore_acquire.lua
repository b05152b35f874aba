-- Take permits from a semaphore (Redisson RSemaphore layout).
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  how many permits to take, at least 1
-- ARGV[2]  latch TTL in milliseconds
-- ARGV[3]  the call's deadline, epoch ms by the server's clock (absent or 0:
--          none)
--
-- Replies 1 when they were taken (and writes the latch, so that a request
-- whose reply was lost can be settled, see acquire_cancel.lua), 0 when
-- fewer are available (a missing key counts as no permits). A resend of a
-- request already granted (latch `1`) takes nothing more and replies 1. A
-- request given up by its client (latch `x`) that reaches Redis late takes
-- nothing and replies 0. A key of another type, or a string that is no
-- integer, fails with `WRONGTYPE holds a <type>: <key>` and changes nothing.
-- A call that runs after its deadline (ARGV[3]: its client gave up on the
-- reply, and may have exited since) changes nothing and replies -5: a
-- grant nobody would own is never made.
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
if too_late(ARGV[3]) then
    return -5
end
local latch = redis.call('get', KEYS[2])
if latch == 'x' then
    return 0
end
if latch == '1' then
    return 1
end
local available = count_of(KEYS[1])
if type(available) == 'table' then
    return available
end
if available ~= false and available >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 1, 'px', ARGV[2])
    return 1
end
return 0
