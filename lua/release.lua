-- Release one hold of a reentrant lock, idempotently per request id.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, `redisson_lock__channel:{name}`
-- KEYS[3]  the unlock latch, `redisson_unlock_latch:{name}:<request-id>`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  lease in milliseconds: the least TTL the key keeps when holds
--          remain
-- ARGV[3]  owner field, `<client-uuid>:<owner-id>`
-- ARGV[4]  the publish command, `publish` or `spublish`
-- ARGV[5]  latch TTL in milliseconds
-- ARGV[6]  optional: the call's deadline, epoch ms by the server's clock
--          (the end of the hold's lease: a release that runs later may
--          meet the owner's next hold); absent, 0 or no positive number:
--          none
-- ARGV[7]  optional: keep for this many milliseconds (`keep_until`, a
--          job's "at least for"); absent or 0: release
-- KEYS[4]  optional, with ARGV[8] and ARGV[9]: a job's last occurrence
--          done, `ferrisson_job_done:{name}`
-- ARGV[8]  the occurrence the run served, a decimal integer below 2^53
-- ARGV[9]  how long the job remembers it, in milliseconds
-- KEYS[4]  optional, without ARGV[8]: a give-back's grant, the acquire
--          latch of the request whose hold this gives back,
--          `ferrisson_acquire_latch:{name}:<request-id>`
--          A give-back that runs (its grant shown, the key a lock) closes
--          the grant (`x`, its TTL kept), also when the owner holds
--          nothing: a settle of the grant run again, under another request
--          id, then finds nothing more to give back.
--
-- Replies 1 when this was the last hold (the key is deleted and the message
-- published), 0 when holds remain (count lowered, TTL raised to the lease
-- if it was shorter),
-- 2 when this was the last hold and ARGV[7] is over 0 (the owner keeps one
-- hold, the TTL becomes ARGV[7], nothing is published: the lock is still
-- held, and expires then), nil when the owner holds nothing, or, for a
-- give-back, when its grant's latch does not show the grant: nothing is
-- written then. A retry with the same request id replies
-- what the first call replied, without releasing again; a first call that
-- runs past its deadline changes nothing and replies -5. A key that is no
-- lock hash (another type, or a hash with other fields) is left alone and
-- fails with `WRONGTYPE holds a <type>: <key>`.
-- With KEYS[4], the last hold's release (or keep) also raises the job's
-- last occurrence done to ARGV[8], with ARGV[9] as its TTL, in the same
-- call; a higher occurrence already there is left as it is. Nothing is
-- marked when the owner holds nothing (its lease ran out: the run is no
-- longer its own) or when holds remain. A KEYS[4] that holds anything
-- but a decimal integer is left alone and fails as above, before any
-- write.
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
-- Past its deadline (by the server's clock), a first call changes nothing.
-- Written inline, not as the other scripts' `too_late`: every release runs
-- this, and without a deadline it costs one lookup.
-- A deadline that is no positive number is none.
local deadline = tonumber(ARGV[6] or '')
if deadline ~= nil and deadline > 0 then
    local clock = redis.call('time')
    if tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > deadline then
        return -5
    end
end
local grant = nil
if ARGV[8] == nil then
    grant = KEYS[4]
end
if not grant_shown(grant) then
    return nil
end
-- HGET fails on another type: that, like a field not found, is looked at
-- here (nil: not held).
local held = redis.pcall('hget', KEYS[1], ARGV[3])
if type(held) == 'table' then
    return not_a_lock(KEYS[1]) or held
end
if held == false then
    return none_held(grant, KEYS[1])
end
-- A job's occurrence: its marker is read (and refused when it is no
-- integer) before any write, and raised after the first write, which
-- grows no memory (a Redis out of memory still runs the script then).
local done_key, occurrence = KEYS[4], tonumber(ARGV[8] or '')
local done_before = false
if done_key ~= nil and occurrence ~= nil then
    done_before = count_of(done_key)
    if type(done_before) == 'table' then
        return done_before
    end
end
local function mark_done()
    if done_key ~= nil and occurrence ~= nil
        and (done_before == false or done_before < occurrence) then
        redis.call('set', done_key, ARGV[8], 'px', ARGV[9])
    end
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
local keep = tonumber(ARGV[7] or '0') or 0
if keep > 0 then
    -- PEXPIRE first: it grows nothing, so Redis runs it when it is out of
    -- memory, and a script that has written may write on (the latch's SET),
    -- where a first write that may grow memory is refused (OOM). The field
    -- is already 1 but for a count written in another form.
    redis.call('pexpire', KEYS[1], keep)
    if held ~= '1' then
        redis.call('hset', KEYS[1], ARGV[3], 1)
    end
    mark_done()
    close_grant(grant)
    redis.call('set', unlock_latch, 2, 'px', ARGV[5])
    return 2
end
redis.call('del', KEYS[1])
mark_done()
redis.call(ARGV[4], KEYS[2], ARGV[1])
close_grant(grant)
redis.call('set', unlock_latch, 1, 'px', ARGV[5])
return 1
