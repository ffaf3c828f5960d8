-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds "<tokens in millionths>:<last, the time (µs) of the last
-- refill step>". Parameters: capacity (millionths), refill rate
-- (millionths per interval), refill interval (µs).

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last = capacity, now
  local t, l = decode(redis.call('GET', key), 2)
  if t then
    tokens, last = t, l
    if now > last then -- no refill while the clock goes back
      local steps = math.floor((now - last) / interval)
      if steps >= math.ceil((capacity - tokens) / rate) then
        tokens = capacity
      else
        tokens = tokens + steps * rate
        last = last + steps * interval
      end
    end
    if tokens >= capacity then -- full: the same as a fresh bucket, phase and all
      tokens, last = capacity, now
    end
  end

  local cost = need * 1000000
  local allowed = 0
  if tokens >= cost then
    allowed = 1
    if take then tokens = tokens - cost end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = last + math.ceil((cost - tokens) / rate) * interval - now
  end
  if tokens < capacity then
    reset_after = last + math.ceil((capacity - tokens) / rate) * interval - now
  end
  if allowed == 1 and take then
    -- Expire when full again: from then on a missing key decides the same.
    redis.call('SET', key, string.format('%d:%d', tokens, last), 'PX', math.ceil(reset_after / 1000) + slack)
  end
  return allowed, tokens, retry_after, reset_after
end
