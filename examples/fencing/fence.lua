-- The fence of docs/fencing.md, for Redis: check the token and write, in
-- one script, so that nothing runs between the two.
--   KEYS[1]  the fence: the largest fencing token seen for the lock
--   KEYS[2]  the key the guarded write sets
--   ARGV[1]  the fencing token, in decimal
--   ARGV[2]  the value to write
-- Returns 1 when it wrote, 0 when the token is smaller than the fence's
-- (stale: nothing written).
local token = ARGV[1]
if not (token == '0' or string.match(token, '^[1-9]%d*$'))
    or #token > 20 or (#token == 20 and token > '18446744073709551615') then
  return redis.error_reply('ERR fencing token is not a decimal uint64: ' .. token)
end
-- Compared as decimal strings: a Lua number is a double, exact only up to 2^53.
local seen = redis.call('GET', KEYS[1])
if seen and (#token < #seen or (#token == #seen and token < seen)) then
  return 0
end
redis.call('SET', KEYS[1], token)
redis.call('SET', KEYS[2], ARGV[2])
return 1
