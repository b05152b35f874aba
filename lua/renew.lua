-- Renew the leases of held locks; never recreates a lock that is gone.
--
-- KEYS[1..n]    lock hashes (the client sends at most 200 per call)
-- ARGV[1]       lease in milliseconds
-- ARGV[2..n+1]  owner field for each key, in the order of KEYS
--
-- Replies an array of n integers: 1 where the owner still holds the key and
-- its TTL was reset to the lease, 0 where it does not (stop renewing it).
-- A key that now holds another type counts as not held, rather than failing
-- the renewal of every other key in the call.
local renewed = {}
for i, key in ipairs(KEYS) do
    if redis.pcall('hexists', key, ARGV[i + 1]) == 1 then
        redis.call('pexpire', key, ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
