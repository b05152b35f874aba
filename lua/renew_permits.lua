-- Renew the leases of permits of permit-expirable semaphores that the
-- watchdog keeps; never puts a permit back out, and takes none back.
--
-- KEYS[1..n]    each permit's `{name}:timeout` sorted set (a key may come
--               more than once: one semaphore's permits)
-- ARGV[1]       lease in milliseconds
-- ARGV[2..n+1]  each permit's id (16 raw bytes), in the order of KEYS
--
-- Where the permit is still out and its lease has not ended by the
-- server's clock, its score becomes now plus the lease; a later score is
-- kept (a renewal that reaches Redis late, or after the holder gave the
-- permit a longer lease, must not cut it short). A permit that is not out,
-- or whose lease ended and that no script took back yet, is left alone:
-- the next call on its semaphore takes it back, publishing the count as
-- every call does; this script publishes nothing.
-- Replies the positions (1 to n, ascending) of the permits not renewed:
-- an empty array when every permit was. A key that now holds another type
-- counts as a permit not out, rather than failing every other renewal of
-- the call.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local until_ = now + tonumber(ARGV[1])
local gone = {}
for i, key in ipairs(KEYS) do
    local score = redis.pcall('zscore', key, ARGV[i + 1])
    if type(score) == 'string' and tonumber(score) > now then
        if tonumber(score) < until_ then
            redis.call('zadd', key, until_, ARGV[i + 1])
        end
    else
        gone[#gone + 1] = i
    end
end
return gone
