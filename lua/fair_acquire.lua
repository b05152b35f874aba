-- Acquire, or re-enter, a fair lock (Redisson RFairLock layout): first come,
-- first served through a queue of waiters.
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  the queue list, `redisson_lock_queue:{name}` (owner fields)
-- KEYS[3]  the timeout sorted set, `redisson_lock_timeout:{name}` (member =
--          owner field, score = epoch ms after which it counts as dead)
-- KEYS[4]  the acquire latch, `ferrisson_acquire_latch:{name}:<request-id>`
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  waiter timeout in milliseconds (how long a queued waiter may
--          stay silent before it counts as dead)
-- ARGV[4]  `1` to join the queue when the lock is taken, `0` for one
--          attempt that leaves no trace
-- ARGV[5]  latch TTL in milliseconds (at least the lease)
-- ARGV[6]  `0` non-reentrant (Redisson RNonReentrantFairLock): a holder
--          asking again is refused with -4, and nothing changes; `1` (or
--          absent) reentrant
-- ARGV[7]  the call's deadline, epoch ms by the server's clock (absent or 0:
--          none)
--
-- Dead waiters at the head of the queue (score <= now, by the server's
-- clock) are dropped first. Replies nil when the owner now holds the lock
-- (taken: it leaves the queue, and every remaining score is lowered by the
-- waiter timeout; or re-entered). Otherwise replies how long to wait at
-- most, in milliseconds, at least 1 for a queued waiter: a new waiter is
-- queued with a score of the waiter before it (or the lock's TTL) plus the
-- waiter timeout.
--
-- Safe to resend per request id: a granted request writes its latch (TTL:
-- ARGV's latch TTL); a resend while the latch exists changes nothing and
-- replies nil while the owner holds the lock, else -2 (the hold it took is
-- gone: a send arriving late takes no new one, which nobody would own). A
-- request given up by its client (latch `x`, see acquire_cancel.lua) that
-- reaches Redis late changes nothing and replies -2.
--
-- A lock key that is no lock hash (another type, or a hash with other
-- fields), a queue that is no list or a timeout set that is no sorted set
-- fails with `WRONGTYPE holds a <type>: <key>` and changes nothing.
-- A call that runs after its deadline (ARGV[7]: its client gave up on the
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
if too_late(ARGV[7]) then
    return -5
end
local latch = redis.call('get', KEYS[4])
if latch == 'x' then
    return -2
end
local refused = not_a_lock(KEYS[1]) or wrong_type(KEYS[2], 'list')
    or wrong_type(KEYS[3], 'zset')
if refused then
    return refused
end
-- Granted before: nil while the owner holds it, else -2 (that hold is
-- gone; a late send takes no new one).
if latch ~= false then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        return nil
    end
    return -2
end
if ARGV[6] == '0' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return -4
end
local wait = tonumber(ARGV[3])
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
if redis.call('exists', KEYS[1]) == 0
    and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -wait, waiter)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[4], 1, 'px', ARGV[5])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- A re-entry raises the TTL, never lowers it (see acquire.lua).
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    redis.call('set', KEYS[4], 1, 'px', ARGV[5])
    return nil
end
local pttl = redis.call('pttl', KEYS[1])
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine == false then
    if ARGV[4] ~= '1' then
        return math.max(pttl, 0)
    end
    -- Queued behind the last waiter's timeout, or behind the holder's TTL
    -- when the last entry has no score (a queue left half-written, which
    -- Redisson's script guards against the same way).
    local last = redis.call('lindex', KEYS[2], -1)
    local last_score = false
    if last ~= false and last ~= ARGV[2] then
        last_score = redis.call('zscore', KEYS[3], last)
    end
    local ahead = math.max(pttl, 0)
    if last_score ~= false then
        ahead = math.max(0, tonumber(last_score) - now)
    end
    mine = ahead + wait + now
    if redis.call('zadd', KEYS[3], mine, ARGV[2]) == 1 then
        redis.call('rpush', KEYS[2], ARGV[2])
    end
end
-- While the lock is held, until it expires; while it is free but another
-- waiter is first, until the waiter ahead would count as dead. A message
-- on the owner's channel comes sooner when the line moves.
if pttl > 0 then
    return pttl
end
return math.max(1, tonumber(mine) - wait - now)
