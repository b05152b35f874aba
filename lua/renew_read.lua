-- Renew the read holds of read-write locks; never recreates one that is
-- gone.
--
-- KEYS[2i-1]  a lock hash
-- KEYS[2i]    its owner's read-hold timeout prefix,
--             `{name}:<owner-field>:rwlock_timeout`
-- ARGV[1]     lease in milliseconds
-- ARGV[i+1]   the owner's read field, in the order of the pairs
--
-- Where the owner still has read holds, the TTL of each of its hold keys,
-- and the hash's, becomes the longer of its own and the lease: a renewal
-- that reaches Redis after its hold was released, when the owner holds
-- again with a longer lease of its own, must not cut that lease short. Replies the positions (1 to n for n pairs, ascending) of the
-- pairs whose owner has none left (stop renewing them): an empty array when
-- every pair was renewed. A key of another type counts as none.
local lease = tonumber(ARGV[1])
local gone = {}
for i = 1, #KEYS / 2 do
    local hash, prefix = KEYS[2 * i - 1], KEYS[2 * i]
    local count = tonumber(redis.pcall('hget', hash, ARGV[i + 1]))
    if type(count) == 'number' and count > 0 then
        for n = 1, count do
            local hold = prefix .. ':' .. n
            if redis.call('pttl', hold) < lease then
                redis.call('pexpire', hold, ARGV[1])
            end
        end
        local ttl = redis.call('pttl', hash)
        redis.call('pexpire', hash, math.max(ttl, tonumber(ARGV[1])))
    else
        gone[#gone + 1] = i
    end
end
return gone
