-- Leaky bucket (policing); the model is ratekeeper's leakybucket.go.
-- KEYS[1]  "<level in billionths>:<time it was measured, µs>"
-- ARGV[4]  capacity (billionths), ARGV[5] leak rate (billionths per µs)

local capacity, rate = tonumber(ARGV[4]), tonumber(ARGV[5])

local level, at = 0, now
local l, t = decode(redis.call('GET', KEYS[1]), 2)
if l then
  at = t
  if now > at then at = now end -- no drain while the clock goes back
  if at - t >= math.ceil(l / rate) then level = 0 else level = l - (at - t) * rate end
end
local cost = need * 1000000000
local allowed = 0
if level + cost <= capacity then
  allowed = 1
  if n > 0 then level = level + cost end
end
local retry_after = 0
if allowed == 0 then retry_after = at + math.ceil((level + cost - capacity) / rate) - now end
local reset_after = at + math.ceil(level / rate) - now
if allowed == 1 and n > 0 then
  redis.call('SET', KEYS[1], string.format('%d:%d', level, at), 'PX', math.ceil(reset_after / 1000) + slack)
end
local remaining = capacity - level
if remaining < 0 then remaining = 0 end
return {allowed, math.floor(remaining / 1000), retry_after, reset_after}
