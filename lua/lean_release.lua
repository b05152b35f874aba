-- Release a reentrant lock's hold taken or kept the lean way: no latch.
-- The client sends it only for the owner's one hold, with its gate open
-- (nothing else of the owner's on its way), and after a lost reply sends
-- it again only past this call's deadline; any number of copies release
-- once.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[3]  the publish command, `publish` or `spublish`
-- ARGV[4]  the call's deadline, epoch ms by the server's clock (required:
--          without one the call fails with `ERR a lean call needs its
--          deadline` and changes nothing)
-- ARGV[5]  not-before, epoch ms by the server's clock: the latest deadline
--          of the owner's calls whose replies the client never read, which
--          may still run until then (0 or absent: none)
--
-- Replies 1 when the owner held the lock: the key is deleted, whatever the
-- owner's count, and the message published. Replies nil when the owner
-- holds nothing, and changes nothing. A key that is no lock hash (another
-- type, or a hash with other fields) is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`. A call that runs after its deadline
-- changes nothing and replies -5; one that runs while the server's clock
-- is not past its not-before changes nothing and replies -6 (the client
-- then sends the latched release).
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
if (tonumber(ARGV[4]) or 0) <= 0 then
    return redis.error_reply('ERR a lean call needs its deadline')
end
if too_late(ARGV[4]) then
    return -5
end
if (tonumber(ARGV[5]) or 0) > 0 and not too_late(ARGV[5]) then
    return -6
end
-- HEXISTS fails on another type: that, like a field not found, is looked
-- at here (nil: not held).
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return not_a_lock(KEYS[1]) or nil
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
