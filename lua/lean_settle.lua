-- Settle a lean acquire (lean_acquire.lua) whose reply was lost: whether
-- it took the lock. Past the acquire's deadline no copy of it can run any
-- more, and the owner's gate kept anything else of the owner's off the
-- lock meanwhile: a hold of the owner's is that acquire's.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[2]  the lean acquire's deadline, epoch ms by the server's clock
--
-- Replies -6 while the server's clock is not past the deadline (a copy of
-- the acquire may still run; nothing is read), else 1 when the owner holds
-- the lock and 0 when it does not. It writes nothing. A key that is no
-- lock hash fails with `WRONGTYPE holds a <type>: <key>`.
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
if not too_late(ARGV[2]) then
    return -6
end
if redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 then
    return 1
end
return not_a_lock(KEYS[1]) or 0
