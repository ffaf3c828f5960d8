-- In-flight slots (driver.Slots), one script call per operation. KEYS[1]
-- is a sorted set of a key's holders, each scored by the time its lease
-- ends, in microseconds on the server's clock (or the one ARGV supplies);
-- a lease that ended at now or before is free.
--
-- ARGV: op ('acquire', 'renew' or 'release'), holder, limit, ttl (µs),
-- now (µs, or '' for the server's clock), slack (ms added to the key's
-- expiry).
--
-- It returns {acquired or renewed (1 or 0), slots held, retry after (µs)}:
-- retry after is, when acquire finds every slot held, the time until the
-- first lease ends. Integers are written with '%d': tostring would round
-- a microsecond time to 14 digits.
local key, op, holder = KEYS[1], ARGV[1], ARGV[2]

if op == 'release' then
  return {redis.call('ZREM', key, holder), 0, 0}
end

local limit, ttl, slack = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])
local now
if ARGV[5] == '' then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
else
  now = tonumber(ARGV[5])
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
local ends = string.format('%d', now + ttl)
-- Every lease ends within ttl: so does the key, once none is renewed.
local expiry = math.ceil(ttl / 1000) + slack

if op == 'renew' then
  if not redis.call('ZSCORE', key, holder) then
    return {0, 0, 0}
  end
  redis.call('ZADD', key, ends, holder)
  redis.call('PEXPIRE', key, expiry)
  return {1, 0, 0}
end

local held = redis.call('ZCARD', key)
if held >= limit and not redis.call('ZSCORE', key, holder) then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, held, tonumber(first[2]) - now}
end
held = held + redis.call('ZADD', key, ends, holder)
redis.call('PEXPIRE', key, expiry)
return {1, held, 0}
