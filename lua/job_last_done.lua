-- Read the last occurrence a job completed, changing nothing. A run of an
-- occurrence reads it once it holds the job's lock: an occurrence at or
-- below it is done, and the run skips it.
--
-- KEYS[1]  the job's last occurrence done, `ferrisson_job_done:{name}`
--          (raised by `release.lua` with its KEYS[4])
--
-- Replies that occurrence's id, an integer; -1 when the key is missing (no
-- occurrence done within the time the job remembers one). A key that holds
-- anything but a decimal integer is left alone and fails with
-- `WRONGTYPE holds a <type>: <key>`.
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
local done = count_of(KEYS[1])
if type(done) == 'table' then
    return done
end
return done or -1
