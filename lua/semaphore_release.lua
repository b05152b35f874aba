-- Give permits to a semaphore (a release, or permits added), and tell the
-- waiters.
--
-- KEYS[1]  the semaphore: a string holding the number of available permits
-- KEYS[2]  its channel, `redisson_sc:{name}`
-- ARGV[1]  how many permits, at least 1
-- ARGV[2]  the publish command, `publish` or `spublish`
--
-- Replies the new number of available permits, which is also the message
-- published. A value that is not an integer is an error (INCRBY's).
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
