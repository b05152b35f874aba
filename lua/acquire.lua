-- Acquire, or re-enter, a reentrant lock (Redisson RLock layout), safely
-- resent per request id; or acquire a non-reentrant lock (Redisson
-- RNonReentrantLock: the same hash, a hold count of 1).
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  latch TTL in milliseconds (at least the lease)
-- ARGV[4]  `0` non-reentrant: a holder asking again is refused with -4 and
--          nothing changes; `1` (or absent) reentrant
-- ARGV[5]  the call's deadline, epoch ms by the server's clock (absent or 0:
--          none)
--
-- Replies nil when the owner now holds the lock: the hold count was raised by
-- one, the key's TTL set to the lease (raised to it, on a re-entry), and the
-- latch written. Otherwise
-- replies the key's PTTL in milliseconds (-1 when the key has no TTL), and
-- changes nothing. A resend of a granted request (its latch exists) changes
-- nothing: it replies nil while the owner still holds the lock, else -2
-- (the hold it took is gone: a send arriving late takes no new one, which
-- nobody would own). A request given up by its client (latch `x`, see
-- acquire_cancel.lua) that reaches Redis late changes nothing and replies
-- -2.
-- A key that is no lock hash (another type, or a hash with other fields)
-- fails with `WRONGTYPE holds a <type>: <key>` and changes nothing.
-- A call that runs after its deadline (ARGV[5]: its client gave up on the
-- reply, and may have exited since) changes nothing and replies -5: a
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
if too_late(ARGV[5]) then
    return -5
end
local latch = redis.call('get', KEYS[2])
if latch == 'x' then
    return -2
end
-- Granted before: nil while the owner holds the lock, else -2 (that hold
-- is gone; a late send takes no new one). HEXISTS fails on another type:
-- not held, and refused as below.
if latch ~= false then
    if redis.pcall('hexists', KEYS[1], ARGV[2]) == 1 then
        return nil
    end
    return not_a_lock(KEYS[1]) or -2
end
-- The common case first: a free lock is taken with no look at its fields.
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 1, 'px', ARGV[3])
    return nil
end
-- HEXISTS fails on another type: that, like a field not found, is looked
-- at below.
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return not_a_lock(KEYS[1]) or redis.call('pttl', KEYS[1])
end
-- The owner holds it: a re-entry. It raises the TTL, never lowers it: the
-- owner's holds share it, and an acquire that reaches Redis late (one its
-- caller gave up on) must not cut a later hold's longer lease short.
if ARGV[4] == '0' then
    return -4
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
end
redis.call('set', KEYS[2], 1, 'px', ARGV[3])
return nil
