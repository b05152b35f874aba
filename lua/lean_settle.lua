-- Settle the owner's lean sends (lean_acquire.lua, lean_release.lua, or
-- this script to release) whose replies were lost, once none of them can
-- run any more: past the latest of their deadlines by the server's clock.
-- The client's own clock is not trusted to tell when that is. The owner's
-- gate kept anything else of the owner's off the lock meanwhile, so a hold
-- of the owner's is the lost acquire's, or the one the lost release was
-- to delete.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[2]  the latest deadline of the lost sends, epoch ms by the server's
--          clock
-- ARGV[3]  `take` (a lost acquire: read whether it took the lock) or
--          `release` (a lost release: release now)
-- ARGV[4]  the unlock message, `0`
-- ARGV[5]  the publish command, `publish` or `spublish`
-- ARGV[6]  this call's own deadline, epoch ms by the server's clock
-- ARGV[7]  to take: the lease in milliseconds, the least TTL a hold found
--          keeps (it may be an older hold of the owner's, left standing,
--          which the settle adopts)
--          (ARGV[2] and ARGV[6] are required: without them the call fails
--          with `ERR a lean call needs its deadline` and changes nothing)
--
-- Replies -5 after this call's own deadline and -6 while the server's
-- clock is not past ARGV[2]: nothing is read or changed. Then, to take:
-- 1 when the owner holds the lock (its TTL raised to ARGV[7] if it was
-- shorter, never lowered), 0 when it does not, writing nothing; to
-- release: 1 when the owner held the lock (the key deleted and the message
-- published), nil when it did not (nothing changes). A key that is no lock
-- hash fails with `WRONGTYPE holds a <type>: <key>` and is left alone.
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
if (tonumber(ARGV[2]) or 0) <= 0 or (tonumber(ARGV[6]) or 0) <= 0 then
    return redis.error_reply('ERR a lean call needs its deadline')
end
if too_late(ARGV[6]) then
    return -5
end
if not too_late(ARGV[2]) then
    return -6
end
if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then
    local refused = not_a_lock(KEYS[1])
    if refused then
        return refused
    end
    if ARGV[3] == 'take' then
        return 0
    end
    return nil
end
if ARGV[3] == 'take' then
    local lease = tonumber(ARGV[7])
    if lease == nil or lease <= 0 then
        return redis.error_reply('ERR a lean settle to take needs the lease')
    end
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return 1
end
redis.call('del', KEYS[1])
redis.call(ARGV[5], KEYS[2], ARGV[4])
return 1
