-- Acquire, or re-enter, a fenced lock: the reentrant lock plus a token,
-- safely resent per request id.
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  the token counter, `redisson_lock_token:{name}` (no TTL: tokens
--          rise forever, even when Redis lost the counter, see below)
-- KEYS[3]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  latch TTL in milliseconds (at least the lease)
-- ARGV[4]  the call's deadline, epoch ms by the server's clock (absent or 0:
--          none)
--
-- Replies {1, token} when the owner now holds the lock: the hold count was
-- raised by one, the key's TTL set to the lease (raised to it, on a
-- re-entry), the counter raised (re-entry included) and the latch set to the token, the counter's new value. The
-- token is the counter plus one, or the server's clock in microseconds
-- (TIME) when that is higher, written back into the counter: so a counter
-- lost with a restart without persistence, or a failover that lost writes,
-- starts again above every token drawn before (as long as the clock did not
-- step back, and fewer than a million tokens a second were drawn), and a
-- Redisson `RFencedLock`, which INCRs the same counter, goes on from there.
-- Tokens stay below 2^53 (the clock reaches it in the year 2255), exact as
-- Lua numbers. Otherwise replies {0, pttl} (pttl -1 when the key has no TTL) and
-- changes nothing. A resend of a granted request (its latch exists)
-- changes nothing: it replies {1, token} with the first call's token while
-- the owner still holds the lock, else {0, -2} (the hold it took is gone: a
-- send arriving late takes no new one, which nobody would own). A request
-- given up by its client (latch `x`, see acquire_cancel.lua) that reaches
-- Redis late changes nothing and replies {0, -2}.
-- A lock key that is no lock hash (another type, or a hash with other
-- fields), or a counter that is no integer, fails with
-- `WRONGTYPE holds a <type>: <key>` and changes nothing.
-- A call that runs after its deadline (ARGV[4]: its client gave up on the
-- reply, and may have exited since) changes nothing and replies {0, -5}: a
-- grant nobody would own is never made.
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
if too_late(ARGV[4]) then
    return {0, -5}
end
local granted = redis.call('get', KEYS[3])
if granted == 'x' then
    return {0, -2}
end
-- HEXISTS fails on another type: not held, and looked at below.
local held = redis.pcall('hexists', KEYS[1], ARGV[2]) == 1
-- Granted before: its token while the owner holds the lock, else {0, -2}
-- (that hold is gone; a late send takes no new one).
if granted ~= false then
    if held then
        return {1, tonumber(granted)}
    end
    return not_a_lock(KEYS[1]) or {0, -2}
end
if not held and redis.call('exists', KEYS[1]) == 1 then
    return not_a_lock(KEYS[1]) or {0, redis.call('pttl', KEYS[1])}
end
-- The token first: a counter that is not a number fails the call before
-- anything is written (a script's writes are not rolled back).
local counter = count_of(KEYS[2])
if type(counter) == 'table' then
    return counter
end
local token = redis.call('incr', KEYS[2])
local clock = redis.call('time')
local floor = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
if token < floor then
    token = floor
    redis.call('set', KEYS[2], string.format('%.0f', token))
end
-- A re-entry raises the TTL, never lowers it (see acquire.lua).
redis.call('hincrby', KEYS[1], ARGV[2], 1)
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
end
redis.call('set', KEYS[3], string.format('%.0f', token), 'px', ARGV[3])
return {1, token}
