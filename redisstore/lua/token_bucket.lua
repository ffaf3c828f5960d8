-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds "<tokens in millionths, below zero by a debt>:<last, the time
-- (µs) of the last refill step>". Parameters: capacity (millionths),
-- refill rate (millionths per interval), refill interval (µs).

-- tb_refill refills a bucket of tokens refilled last up to t, to at most
-- top tokens: full there, it is as good as fresh, and its refill phase
-- restarts at t.
local function tb_refill(tokens, last, t, top, rate, interval)
  if t > last then -- no refill while the clock goes back
    local steps = math.floor((t - last) / interval)
    if steps >= math.ceil((top - tokens) / rate) then
      tokens = top
    else
      tokens = tokens + steps * rate
      last = last + steps * interval
    end
  end
  if tokens >= top then tokens, last = top, t end
  return tokens, last
end

-- tb_at returns the bucket's tokens and the time of its last refill step
-- at now, whether the key holds a bucket, and the holds still live at
-- now. Each hold that expired by now, in order, kept the refill from
-- filling its tokens until it expired.
local function tb_at(key, now, capacity, rate, interval)
  local base, holds = split_holds(redis.call('GET', key))
  local t, l = decode(base, 2, true)
  if not t then return capacity, now, false, nil end
  local tokens, last = t, l
  local held = holds_units(holds) * 1000000
  local live = nil
  if holds then
    live = {}
    for _, h in ipairs(holds) do
      if h[1] <= now then
        tokens, last = tb_refill(tokens, last, h[1], capacity - held, rate, interval)
        held = held - h[2] * 1000000
      else
        live[#live + 1] = h
      end
    end
  end
  tokens, last = tb_refill(tokens, last, now, capacity - held, rate, interval)
  return tokens, last, true, live
end

-- tb_fills returns when the refills of a bucket of tokens refilled last
-- bring it need tokens: last itself if it holds them.
local function tb_fills(tokens, last, need, rate, interval)
  if tokens >= need then return last end
  return last + math.ceil((need - tokens) / rate) * interval
end

-- tb_when returns the earliest time, from now, at which the bucket holds
-- need tokens, if nothing else happens: once its refills bring them, and
-- enough holds have expired for need to fit beside the others. With need
-- the capacity, it is when the bucket is full again.
local function tb_when(now, tokens, last, need, live, capacity, rate, interval)
  if not live then return math.max(now, tb_fills(tokens, last, need, rate, interval)) end
  local held, from = holds_units(live) * 1000000, now
  for _, h in ipairs(live) do
    if need <= capacity - held then
      local at = math.max(from, tb_fills(tokens, last, need, rate, interval))
      if at < h[1] then return at end
    end
    tokens, last = tb_refill(tokens, last, h[1], capacity - held, rate, interval)
    held = held - h[2] * 1000000
    from = h[1]
  end
  return math.max(from, tb_fills(tokens, last, need, rate, interval))
end

-- tb_outcome is the answer for a request of cost millionths.
local function tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval, live)
  local retry_after = 0
  if allowed == 0 then
    retry_after = tb_when(now, tokens, last, cost, live, capacity, rate, interval) - now
  end
  return allowed, tokens, retry_after, tb_when(now, tokens, last, capacity, live, capacity, rate, interval) - now
end

-- tb_peek is the answer for a peek, a request of cost 1 that takes
-- nothing: what a charge or a refund reports.
local function tb_peek(tokens, last, now, capacity, rate, interval, live)
  local allowed = 0
  if tokens >= 1000000 then allowed = 1 end
  return tb_outcome(allowed, tokens, last, 1000000, now, capacity, rate, interval, live)
end

-- tb_keep writes the bucket and its live holds, to expire when full
-- again (reset_after from now): from then on a missing key decides the
-- same. A full bucket without holds is a fresh one, and deleted.
local function tb_keep(key, tokens, last, live, capacity, reset_after, slack)
  if tokens >= capacity and (not live or #live == 0) then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, string.format('%d:%d', tokens, last) .. holds_string(live), 'PX', math.ceil(reset_after / 1000) + slack)
end

-- tb_back gives back up to n tokens, never beyond what the live holds
-- leave: there the bucket is full, and its refill phase restarts.
local function tb_back(now, tokens, last, n, live, capacity)
  local top = capacity - holds_units(live) * 1000000
  tokens = tokens + n * 1000000
  if tokens >= top then return top, now end
  return tokens, last
end

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last, _, live = tb_at(key, now, capacity, rate, interval)
  local cost = need * 1000000
  local allowed = 0
  if tokens >= cost then
    allowed = 1
    if take then tokens = tokens - cost end
  end
  local a, r, t, z = tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval, live)
  if allowed == 1 and take then tb_keep(key, tokens, last, live, capacity, z, slack) end
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
  local tokens, last, _, live = tb_at(key, now, capacity, rate, interval)
  local cost = n * 1000000
  local allowed = 0
  if tokens >= cost then allowed = 1 end
  local floor = -tb_max_debt(rate, interval)
  if tokens < floor then floor = tokens end
  tokens = tokens - cost
  if tokens < floor then tokens, allowed = floor, 2 end
  local _, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval, live)
  tb_keep(key, tokens, last, live, capacity, z, slack)
  return allowed, r, t, z
end

function refunds.token_bucket(key, n, now, slack, capacity, rate, interval)
  local tokens, last, exists, live = tb_at(key, now, capacity, rate, interval)
  if exists then tokens, last = tb_back(now, tokens, last, n, live, capacity) end
  local a, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval, live)
  if exists then tb_keep(key, tokens, last, live, capacity, z, slack) end
  return a, r, t, z
end

-- A lease step (driver.Leaser): back's unused tokens come back as a
-- refund's do, and its hold goes; then a lease of up to want takes what
-- is there, at most half of it, and holds all of it but least, which its
-- request spends at once, until now + ttl.
function leases.token_bucket(key, now, slack, capacity, rate, interval, _, want, least, ttl, back_units, back_expires, unused)
  local tokens, last, _, live = tb_at(key, now, capacity, rate, interval)
  local changed = false
  local rest, found = holds_without(live, back_expires, back_units)
  if found and back_units > 0 then
    live = rest
    tokens, last = tb_back(now, tokens, last, unused, live, capacity)
    changed = true
  end
  local need = math.max(least, 1) * 1000000
  local allowed = 0
  local units, expires = 0, 0
  if tokens >= need then
    allowed = 1
    if want > 0 then
      local take = least
      if not holds_full(live) then
        -- At most half of what is there, so that other holders and
        -- Limiters without leases find some of it too.
        take = math.min(want, math.max(least, 1, math.floor(math.floor(tokens / 1000000) / 2)))
      end
      tokens = tokens - take * 1000000
      if take > least then
        units, expires = take - least, now + ttl
        live = holds_with(live, expires, units)
      end
      changed = true
    end
  end
  local a, r, t, z = tb_outcome(allowed, tokens, last, need, now, capacity, rate, interval, live)
  if changed then tb_keep(key, tokens, last, live, capacity, z, slack) end
  return units, expires, a, r, t, z
end
