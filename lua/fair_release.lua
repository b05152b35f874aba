-- Release one hold of a fair lock, idempotently per request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue list, `redisson_lock_queue:{name}`
-- KEYS[3]  the timeout sorted set, `redisson_lock_timeout:{name}`
-- KEYS[4]  the channel prefix, `redisson_lock__channel:{name}`: a waiter's
--          own channel is `<prefix>:<owner field>`
-- KEYS[5]  the unlock latch, `redisson_unlock_latch:{name}:<request-id>`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  lease in milliseconds: the least TTL the key keeps when holds
--          remain
-- ARGV[3]  owner field
-- ARGV[4]  the publish command, `publish` or `spublish`
-- ARGV[5]  latch TTL in milliseconds
-- KEYS[6]  optional: a give-back's grant, the acquire latch of the request
--          whose hold this gives back,
--          `ferrisson_acquire_latch:{name}:<request-id>`
--          A give-back that runs (its grant shown, the key a lock) closes
--          the grant (`x`, its TTL kept), also when the owner holds
--          nothing: a settle of the grant run again, under another request
--          id, then finds nothing more to give back.
--
-- Dead waiters at the head of the queue are dropped first. Replies 1 when
-- this was the last hold (the hash is deleted and the first waiter woken on
-- its own channel), 0 when holds remain, nil when the owner holds nothing
-- (when the hash is gone altogether, the first waiter is woken all the same);
-- nil too, with nothing written, for a give-back whose grant's latch does
-- not show the grant.
-- A retry with the same request id replies what the first call replied.
-- A lock key that is no lock hash (another type, or a hash with other
-- fields), a queue that is no list or a timeout set that is no sorted set
-- is left alone and fails with `WRONGTYPE holds a <type>: <key>`.
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
local grant = KEYS[6]
if not grant_shown(grant) then
    return nil
end
local refused = not_a_lock(KEYS[1]) or wrong_type(KEYS[2], 'list')
    or wrong_type(KEYS[3], 'zset')
if refused then
    return refused
end
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
if redis.call('exists', KEYS[1]) == 0 then
    -- Already gone (expired or force-unlocked): whoever is first in line
    -- may take it now, so wake them, as Redisson does.
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
    end
    close_grant(grant)
    return nil
end
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    close_grant(grant)
    return nil
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
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then
    redis.call(ARGV[4], KEYS[4] .. ':' .. next, ARGV[1])
end
close_grant(grant)
redis.call('set', unlock_latch, 1, 'px', ARGV[5])
return 1
