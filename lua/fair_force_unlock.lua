-- Delete a fair lock whoever holds it, and wake the first waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue list, `redisson_lock_queue:{name}`
-- KEYS[3]  the timeout sorted set, `redisson_lock_timeout:{name}`
-- KEYS[4]  the channel prefix, `redisson_lock__channel:{name}`
-- ARGV[1]  the unlock message, `0`
-- ARGV[2]  the publish command
--
-- Replies 1 when the lock existed (deleted, first live waiter woken on its
-- own channel), else 0. A key of another type is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE holds a ' .. kind .. ': ' .. KEYS[1])
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
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then
    redis.call(ARGV[2], KEYS[4] .. ':' .. next, ARGV[1])
end
return 1
