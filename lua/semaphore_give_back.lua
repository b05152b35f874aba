-- Give back permits that an acquire took for a caller that never got them
-- (it left, or its reply was lost, or too few replicas acknowledged it),
-- idempotently per request id: nobody waits on a give-back, so the client
-- resends it until it gets through, and only one send may count.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  its channel, `redisson_sc:{name}`
-- KEYS[3]  the give-back's latch, `redisson_unlock_latch:{name}:<request-id>`
-- ARGV[1]  how many permits, at least 1
-- ARGV[2]  the publish command, `publish` or `spublish`
-- ARGV[3]  latch TTL in milliseconds
--
-- Replies the new number of available permits, which is also the message
-- published, and writes it to the latch. A resend of the same request finds
-- the latch and replies what the first send replied, giving nothing more. A
-- missing semaphore counts as 0 permits; the key's TTL, if it has one, is
-- kept. A value that is not an integer is an error (INCRBY's).
local unlock_latch = KEYS[3]
-- shared: replay a finished release
local done = redis.call('get', unlock_latch)
if done ~= false then
    return tonumber(done)
end
-- end shared
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
redis.call('set', unlock_latch, value, 'px', ARGV[3])
return value
