-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds "<tokens in millionths, below zero by a debt>:<last, the time
-- (µs) of the last refill step>". Parameters: capacity (millionths),
-- refill rate (millionths per interval), refill interval (µs).

-- tb_at returns the bucket's tokens and the time of its last refill step
-- at now, and whether the key holds a bucket.
local function tb_at(key, now, capacity, rate, interval)
  local tokens, last = capacity, now
  local t, l = decode(redis.call('GET', key), 2, true)
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
  return tokens, last, t ~= nil
end

-- tb_outcome is the answer for a request of cost millionths.
local function tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval)
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = last + math.ceil((cost - tokens) / rate) * interval - now
  end
  if tokens < capacity then
    reset_after = last + math.ceil((capacity - tokens) / rate) * interval - now
  end
  return allowed, tokens, retry_after, reset_after
end

-- tb_peek is the answer for a peek, a request of cost 1 that takes
-- nothing: what a charge or a refund reports.
local function tb_peek(tokens, last, now, capacity, rate, interval)
  local allowed = 0
  if tokens >= 1000000 then allowed = 1 end
  return tb_outcome(allowed, tokens, last, 1000000, now, capacity, rate, interval)
end

-- tb_set writes the bucket, to expire when full again: from then on a
-- missing key decides the same.
local function tb_set(key, tokens, last, reset_after, slack)
  redis.call('SET', key, string.format('%d:%d', tokens, last), 'PX', math.ceil(reset_after / 1000) + slack)
end

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last = tb_at(key, now, capacity, rate, interval)
  local cost = need * 1000000
  local allowed = 0
  if tokens >= cost then
    allowed = 1
    if take then tokens = tokens - cost end
  end
  local a, r, t, z = tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval)
  if allowed == 1 and take then tb_set(key, tokens, last, z, slack) end
  return a, r, t, z
end

-- The largest debt, in millionths: what the bucket refills in MaxPeriod
-- (10 years), at most MaxLimit (10^9) tokens.
local function tb_max_debt(rate, interval)
  local steps = math.floor(315360000000000 / interval)
  if steps >= math.ceil(1000000000000000 / rate) then return 1000000000000000 end
  return math.floor(steps * rate / 1000000) * 1000000
end

function charges.token_bucket(key, n, now, slack, capacity, rate, interval)
  local tokens, last = tb_at(key, now, capacity, rate, interval)
  local cost = n * 1000000
  local allowed = 0
  if tokens >= cost then allowed = 1 end
  local floor = -tb_max_debt(rate, interval)
  if tokens < floor then floor = tokens end
  tokens = tokens - cost
  if tokens < floor then tokens, allowed = floor, 2 end
  local _, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval)
  tb_set(key, tokens, last, z, slack)
  return allowed, r, t, z
end

function refunds.token_bucket(key, n, now, slack, capacity, rate, interval)
  local tokens, last, live = tb_at(key, now, capacity, rate, interval)
  if live then
    tokens = tokens + n * 1000000
    if tokens >= capacity then
      tokens, last = capacity, now
      redis.call('DEL', key)
    end
  end
  local a, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval)
  if z > 0 then tb_set(key, tokens, last, z, slack) end
  return a, r, t, z
end
