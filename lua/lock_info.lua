-- Read what a lock holds, in one call, without changing anything (every
-- lock kind, Redisson's layout; locks taken by any Redisson-layout client).
--
-- KEYS[1]  the lock hash, at the plain lock name
-- KEYS[2]  fair locks: the queue list, `redisson_lock_queue:{name}`;
--          fenced locks: the token counter, `redisson_lock_token:{name}`
-- KEYS[3]  fair locks: the timeout sorted set, `redisson_lock_timeout:{name}`
-- ARGV[1]  what KEYS[2..] are: `plain` (none), `fair` or `fenced`
--
-- Replies an array of six:
--   1. the hash's fields and values, flat (HGETALL)
--   2. the hash's PTTL in ms (-2 when it does not exist, -1 without a TTL)
--   3. fair: the queue, oldest first; otherwise empty
--   4. fair: the timeout set's members and scores, flat; otherwise empty
--   5. the server's time in epoch ms
--   6. fenced: the token counter, -1 when it was never drawn; otherwise -1
-- A key of another type fails with WRONGTYPE.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local hash = redis.call('hgetall', KEYS[1])
local pttl = redis.call('pttl', KEYS[1])
local queue = {}
local scores = {}
local token = -1
if ARGV[1] == 'fair' then
    queue = redis.call('lrange', KEYS[2], 0, -1)
    scores = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
elseif ARGV[1] == 'fenced' then
    local value = redis.call('get', KEYS[2])
    if value ~= false then
        token = tonumber(value)
    end
end
return {hash, pttl, queue, scores, now, token}
