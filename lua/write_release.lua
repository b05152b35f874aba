-- Release one write hold of a read-write lock, idempotently per request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, `redisson_rwlock:{name}`
-- KEYS[3]  the unlock latch, `redisson_unlock_latch:{name}:<request-id>`
-- KEYS[4]  the name's key prefix, `{name}`: the writer's read-hold timeout
--          keys are `<prefix>:<field>:rwlock_timeout:<n>`
-- ARGV[1]  the write-unlock message, `1` (wakes every waiter)
-- ARGV[2]  lease in milliseconds: the least TTL the key keeps when write
--          holds remain
-- ARGV[3]  write owner field, `<client-uuid>:<owner-id>:write`
-- ARGV[4]  the publish command, `publish` or `spublish`
-- ARGV[5]  latch TTL in milliseconds
-- KEYS[5]  optional: a give-back's grant, the acquire latch of the request
--          whose hold this gives back,
--          `ferrisson_acquire_latch:{name}:<request-id>`
--          A give-back that runs (its grant shown, the key a lock) closes
--          the grant (`x`, its TTL kept), also when the owner holds
--          nothing: a settle of the grant run again, under another request
--          id, then finds nothing more to give back.
--
-- Replies 0 when write holds remain, 1 when this was the last (the hash is
-- deleted, or, when the writer still has read holds, its mode becomes
-- `read` and its TTL the longest remaining read hold's, as a read release
-- sets it: counts whose every timeout key has expired hold nothing, and
-- the hash goes when no read hold is left; the message is published
-- either way, so waiting readers can enter), nil when the owner holds no
-- write hold (and, with nothing written, for a give-back whose grant's
-- latch does not show the grant). A retry with the same
-- request id replies what the first call replied. A key that is no lock
-- hash (another type, or a hash with other fields) is left alone and fails
-- with `WRONGTYPE holds a <type>: <key>`.
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
-- shared: longest read hold (the longest TTL left, in ms, of the read holds
-- counted in the lock hash `key`, by their timeout keys
-- `<prefix>:<field>:rwlock_timeout:<n>`; -3 when none is left: a count
-- whose every timeout key has expired holds nothing)
local function longest_read_hold(key, prefix)
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', key)) do
        local count = tonumber(redis.call('hget', key, field))
        if type(count) == 'number' then
            for n = count, 1, -1 do
                local ttl = redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. n)
                longest = math.max(longest, ttl)
            end
        end
    end
    return longest
end
-- end shared
local unlock_latch = KEYS[3]
-- shared: replay a finished release
local done = redis.call('get', unlock_latch)
if done ~= false then
    return tonumber(done)
end
-- end shared
-- shared: a give-back's grant (whether `grant`, the acquire latch of the
-- request whose hold is given back, shows the grant: `1` or a fencing
-- token; always for a plain release, `grant` nil. The grant's own script
-- wrote the latch with the hold, so a master without it never had the
-- grant, or lost it in a failover: a give-back there takes nothing, where
-- it would take another hold of the owner)
local function grant_shown(grant)
    if grant == nil then
        return true
    end
    local latch = redis.call('get', grant)
    return latch ~= false and latch ~= 'x'
end
-- end shared
-- shared: close a give-back's grant (once the give-back ran, whatever the
-- owner held: `grant` becomes `x`, its TTL kept, so a settle of the grant
-- run again, under another request id, finds nothing more to give back,
-- where it would take the owner's next hold. Called after the script's
-- first write where it has one that grows no memory, so that a Redis out
-- of memory still runs the give-back. Nothing for a plain release, `grant`
-- nil)
local function close_grant(grant)
    if grant ~= nil then
        redis.call('set', grant, 'x', 'keepttl')
    end
end
-- end shared
-- shared: none held (the reply when the owner holds nothing: nil, the
-- grant closed, or `lock`'s refusal when it is no lock, nothing written)
local function none_held(grant, lock)
    local refused = not_a_lock(lock)
    if refused == nil then
        close_grant(grant)
    end
    return refused
end
-- end shared
local grant = KEYS[5]
if not grant_shown(grant) then
    return nil
end
-- HGET fails on another type: that, like a lock not held, is looked at
-- here (nil: not held).
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' then
    return not_a_lock(KEYS[1]) or mode
end
if mode ~= 'write' then
    return none_held(grant, KEYS[1])
end
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    return none_held(grant, KEYS[1])
end
-- shared: drop one hold (`held`, the owner's count, read before: with holds
-- left, the count is lowered, the key's TTL raised to the lease and 0
-- replied; on the last hold the script goes on, and removes the owner's
-- field or the whole hash. The TTL is never lowered while holds remain: the
-- owner's holds share it, and a release that reaches Redis after a later
-- hold of the owner with a longer lease must not cut that lease short. A
-- count of exactly 1, the common case, is not lowered first; any other
-- value goes through HINCRBY, which refuses what is not an integer)
if held ~= '1' and redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('pexpire', KEYS[1], ARGV[2])
    end
    close_grant(grant)
    redis.call('set', unlock_latch, 0, 'px', ARGV[5])
    return 0
end
-- end shared
redis.call('hdel', KEYS[1], ARGV[3])
local longest = -3
if redis.call('hlen', KEYS[1]) > 1 then
    longest = longest_read_hold(KEYS[1], KEYS[4])
end
if longest > 0 then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('pexpire', KEYS[1], longest)
else
    redis.call('del', KEYS[1])
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
close_grant(grant)
redis.call('set', unlock_latch, 1, 'px', ARGV[5])
return 1
