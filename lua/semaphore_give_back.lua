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
-- KEYS[4]  optional: the grant, the acquire latch of the request that took
--          the permits, `ferrisson_acquire_latch:{name}:<request-id>`
--
-- Replies the new number of available permits, which is also the message
-- published, and writes it to the latch. A resend of the same request finds
-- the latch and replies what the first send replied, giving nothing more. A
-- missing semaphore counts as 0 permits; the key's TTL, if it has one, is
-- kept. A value that is not an integer is an error (INCRBY's).
-- With KEYS[4]: nil, nothing written, when the grant is closed (`x`:
-- another give-back of it ran, or its request was settled as not
-- granted); else the give-back closes it (`x`, its TTL kept) when it is
-- there, so that a settle of the grant run again, under another request
-- id, finds nothing more to give back. A grant whose latch ran out is
-- given back all the same: permits never expire.
local unlock_latch = KEYS[3]
-- shared: replay a finished release
local done = redis.call('get', unlock_latch)
if done ~= false then
    return tonumber(done)
end
-- end shared
local grant = KEYS[4]
if grant ~= nil and redis.call('get', grant) == 'x' then
    return nil
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
if grant ~= nil then
    redis.call('set', grant, 'x', 'xx', 'keepttl')
end
redis.call('set', unlock_latch, value, 'px', ARGV[3])
return value
