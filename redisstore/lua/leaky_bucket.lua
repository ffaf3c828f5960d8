-- Leaky bucket (policing); the model is ratekeeper's leakybucket.go.
-- key holds "<level in billionths>:<time it was measured, µs>".
-- Parameters: capacity (billionths), leak rate (billionths per µs).

function algorithms.leaky_bucket(key, take, n, now, slack, capacity, rate)
  local need = n
  if need == 0 then need = 1 end
  local level, at = 0, now
  local l, t = decode(redis.call('GET', key), 2)
  if l then
    at = t
    if now > at then at = now end -- no drain while the clock goes back
    if at - t >= math.ceil(l / rate) then level = 0 else level = l - (at - t) * rate end
  end
  local cost = need * 1000000000
  local allowed = 0
  if level + cost <= capacity then
    allowed = 1
    if take then level = level + cost end
  end
  local retry_after = 0
  if allowed == 0 then retry_after = at + math.ceil((level + cost - capacity) / rate) - now end
  local reset_after = at + math.ceil(level / rate) - now
  if allowed == 1 and take then
    redis.call('SET', key, string.format('%d:%d', level, at), 'PX', math.ceil(reset_after / 1000) + slack)
  end
  local remaining = capacity - level
  if remaining < 0 then remaining = 0 end
  return allowed, math.floor(remaining / 1000), retry_after, reset_after
end
