-- Acquire a reentrant lock (Redisson RLock layout) the lean way: no latch.
-- The client sends it only while its gate is open (the owner holds nothing
-- else of this lock and has nothing else of it on its way), never sends
-- the same request again before its deadline, and settles a lost one with
-- lean_settle.lua after that deadline; every copy of it then runs before
-- the deadline or not at all, and any number of them take one hold.
--
-- KEYS[1]  the lock hash, at the plain lock name
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  the call's deadline, epoch ms by the server's clock (required:
--          without one the call fails with `ERR a lean call needs its
--          deadline` and changes nothing)
-- ARGV[4]  not-before, epoch ms by the server's clock: the latest deadline
--          of the owner's calls whose replies the client never read, which
--          may still run until then (0 or absent: none)
--
-- Replies nil when the owner now holds the lock: a free lock is taken with
-- a hold count of 1 and the lease as its TTL; a hold of the owner's found
-- (another copy of this request took it) is not counted again, its TTL
-- raised to the lease if it was shorter. Otherwise replies the key's PTTL
-- in milliseconds (-1 when the key has no TTL), and changes nothing.
-- A key that is no lock hash (another type, or a hash with other fields)
-- fails with `WRONGTYPE holds a <type>: <key>` and changes nothing.
-- A call that runs after its deadline changes nothing and replies -5; one
-- that runs while the server's clock is not past its not-before changes
-- nothing and replies -6 (the client then sends the latched acquire).
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
if (tonumber(ARGV[3]) or 0) <= 0 then
    return redis.error_reply('ERR a lean call needs its deadline')
end
if too_late(ARGV[3]) then
    return -5
end
if (tonumber(ARGV[4]) or 0) > 0 and not too_late(ARGV[4]) then
    return -6
end
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
-- HEXISTS fails on another type: that, like a field not found, is looked
-- at below.
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return not_a_lock(KEYS[1]) or redis.call('pttl', KEYS[1])
end
-- The owner's hold, which only another copy of this request can have
-- taken: found, not counted again. Its TTL is raised, never lowered.
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
end
return nil
