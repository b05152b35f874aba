-- Release one read hold of a read-write lock, idempotently per request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, `redisson_rwlock:{name}`
-- KEYS[3]  this owner's read-hold timeout prefix,
--          `{name}:<owner-field>:rwlock_timeout`
-- KEYS[4]  the name's key prefix, `{name}`: any owner's timeout keys are
--          `<prefix>:<field>:rwlock_timeout:<n>`
-- KEYS[5]  the unlock latch, `redisson_unlock_latch:{name}:<request-id>`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  read owner field
-- ARGV[3]  the publish command, `publish` or `spublish`
-- ARGV[4]  latch TTL in milliseconds
-- KEYS[6]  optional: a give-back's grant, the acquire latch of the request
--          whose hold this gives back,
--          `ferrisson_acquire_latch:{name}:<request-id>`
--          A give-back that runs (its grant shown, the key a lock) closes
--          the grant (`x`, its TTL kept), also when the owner holds
--          nothing: a settle of the grant run again, under another request
--          id, then finds nothing more to give back.
--
-- Replies 1 when the lock is free now (the hash is deleted and the message
-- published); when holds remain (this owner's or others'), minus the TTL
-- in milliseconds the hash gets, that of the longest remaining read hold
-- (a count of the owner's that no live hold of its client knows of, a
-- grant whose reply was lost, lives that long too), or 0 when only the
-- writer's hold keeps it; nil when the owner holds no read hold (and, with
-- nothing written, for a give-back whose grant's latch does not show the
-- grant). A retry
-- with the same request id replies what the first call replied, without
-- releasing again. A key that is no lock hash (another
-- type, or a hash with other fields) is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
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
local unlock_latch = KEYS[5]
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
local grant = KEYS[6]
if not grant_shown(grant) then
    return nil
end
-- HGET fails on another type: that, like a lock not held, is looked at
-- here (nil: not held).
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' then
    return not_a_lock(KEYS[1]) or mode
end
if mode == false or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return none_held(grant, KEYS[1])
end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = longest_read_hold(KEYS[1], KEYS[4])
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        close_grant(grant)
        redis.call('set', unlock_latch, -longest, 'px', ARGV[4])
        return -longest
    end
    if mode == 'write' then
        close_grant(grant)
        redis.call('set', unlock_latch, 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
close_grant(grant)
redis.call('set', unlock_latch, 1, 'px', ARGV[4])
return 1
