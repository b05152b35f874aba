-- Renew the leases of held locks; never recreates a lock that is gone.
--
-- KEYS[1..n]    lock hashes (the client sends at most 200 per call)
-- ARGV[1]       lease in milliseconds
-- ARGV[2..n+1]  owner field for each key, in the order of KEYS
--
-- Where the owner still holds the key, its TTL is raised to the lease; one
-- already longer is kept: the owner's holds share the TTL, and a renewal
-- that reaches Redis after its hold was released, when the owner holds
-- the lock again with a longer lease of its own, must not cut that lease
-- short.
-- Replies the positions (1 to n, ascending) of the keys the owner no longer
-- holds (stop renewing them): an empty array when every key was renewed,
-- so that the usual reply is a few bytes whatever n is. A key that now
-- holds another type counts as not held, rather than failing the renewal
-- of every other key in the call.
local lease = tonumber(ARGV[1])
local gone = {}
for i, key in ipairs(KEYS) do
    if redis.pcall('hexists', key, ARGV[i + 1]) == 1 then
        if redis.call('pttl', key) < lease then
            redis.call('pexpire', key, ARGV[1])
        end
    else
        gone[#gone + 1] = i
    end
end
return gone
