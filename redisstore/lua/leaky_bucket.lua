-- Leaky bucket (policing); the model is ratekeeper's leakybucket.go.
-- The level is the drain time left, in ticks: a request pours unit ticks,
-- and rate ticks drain each µs. key holds "<time the bucket is empty,
-- µs, rounded up>:<the ticks it was rounded up by>"; a level above
-- capacity holds a debt.
-- Parameters: capacity (ticks), rate (ticks per µs), and cost: unit,
-- the ticks per request.

-- lb_at returns the time the bucket is empty and its spare ticks.
local function lb_at(key, now, rate)
  local e, s = decode(redis.call('GET', key), 2)
  if e and e > now then
    if s > rate - 1 then s = rate - 1 end
    return e, s
  end
  return now, 0
end

-- lb_held returns ceil(level * scale / unit) for the level of a bucket
-- that empties in wait µs with spare ticks, wait * rate - spare, which
-- may pass 2^53: the requests it holds, rounded up, at scale 1 or in
-- millionths (10^6).
local function lb_held(wait, spare, scale, rate, unit)
  local q, r = muldiv(rate, wait, unit) -- wait * rate = q * unit + r
  if q > 1099511627776 then q = 1099511627776 end -- 2^40: only for a clock gone back decades
  local x = r - spare -- above -rate, below unit
  if scale == 1 then
    if x > 0 then return q + 1 end
    return q - math.floor(-x / unit)
  end
  -- floor(|x| * 10^6 / unit): whole requests, and six digits of long
  -- division (each remainder below unit <= 2^49, times 10 below 2^53).
  local neg = x < 0
  if neg then x = -x end
  local whole = math.floor(x / unit)
  local rem, frac = x - whole * unit, 0
  for _ = 1, 6 do
    rem = rem * 10
    local d = math.floor(rem / unit)
    frac, rem = frac * 10 + d, rem - d * unit
  end
  frac = whole * 1000000 + frac
  if neg then return q * scale - frac end
  if rem > 0 then frac = frac + 1 end
  return q * scale + frac
end

-- lb_max_debt is the largest debt: what the bucket drains in MaxPeriod
-- (10 years), at least 1 and at most MaxLimit (10^9) requests.
local function lb_max_debt(rate, unit)
  return math.max(math.min(muldiv(rate, 315360000000000, unit), 1000000000), 1)
end

-- lb_outcome is the answer for a bucket that empties in wait µs, with
-- spare ticks, for a request that fits once wait <= fits.
local function lb_outcome(allowed, wait, spare, fits, capacity, rate, unit)
  local retry_after = 0
  if allowed == 0 then retry_after = wait - fits end
  if wait > math.floor((capacity + spare) / rate) then
    -- In debt, at most MaxLimit (10^9) requests (a clock gone back may
    -- put the level higher than any debt).
    local remaining = (capacity / unit) * 1000000 - lb_held(wait, spare, 1000000, rate, unit)
    return allowed, math.max(remaining, -1000000000000000), retry_after, wait
  end
  -- capacity - level, in ticks; then in millionths of a request, rounded
  -- down: whole requests, and six digits of long division (r < unit <=
  -- 2^49, so r * 10 stays below 2^53).
  local room = capacity - (wait * rate - spare)
  local whole = math.floor(room / unit)
  local r, frac = room - whole * unit, 0
  for _ = 1, 6 do
    r = r * 10
    local d = math.floor(r / unit)
    frac, r = frac * 10 + d, r - d * unit
  end
  return allowed, whole * 1000000 + frac, retry_after, wait
end

-- lb_peek is the answer for a peek, a request of cost 1 that takes
-- nothing: what a charge or a refund reports.
local function lb_peek(wait, spare, capacity, rate, unit)
  local fits = math.floor((capacity - unit + spare) / rate)
  local allowed = 0
  if wait <= fits then allowed = 1 end
  return lb_outcome(allowed, wait, spare, fits, capacity, rate, unit)
end

-- lb_set writes the bucket, to expire when empty.
local function lb_set(key, empty, spare, now, slack)
  redis.call('SET', key, string.format('%d:%d', empty, spare), 'PX', math.ceil((empty - now) / 1000) + slack)
end

function algorithms.leaky_bucket(key, take, n, now, slack, capacity, rate, _, unit)
  local need = n
  if need == 0 then need = 1 end
  local empty, spare = lb_at(key, now, rate)
  local cost = need * unit
  -- The level leaves room for cost once wait <= fits.
  local fits = math.floor((capacity - cost + spare) / rate)
  local allowed = 0
  if empty - now <= fits then
    allowed = 1
    if take then
      -- cost - spare > -rate: the bucket empties step µs later.
      local step = math.ceil((cost - spare) / rate)
      empty, spare = empty + step, step * rate - (cost - spare)
      lb_set(key, empty, spare, now, slack)
    end
  end
  return lb_outcome(allowed, empty - now, spare, fits, capacity, rate, unit)
end

function charges.leaky_bucket(key, n, now, slack, capacity, rate, _, unit)
  local limit = capacity / unit
  local empty, spare = lb_at(key, now, rate)
  local wait = empty - now
  local allowed = 0
  if n <= limit and wait <= math.floor((capacity - n * unit + spare) / rate) then allowed = 1 end
  local pour, held = n, lb_held(wait, spare, 1, rate, unit)
  if held + n > limit + 1 then -- the debt may pass its bound, at least 1
    pour = math.max(math.min(n, limit + lb_max_debt(rate, unit) - held), 0)
  end
  -- pour * unit = q * rate + r: the bucket empties q or q + 1 µs later.
  local q, r = muldiv(pour, unit, rate)
  if r > spare then
    empty, spare = empty + q + 1, rate - r + spare
  else
    empty, spare = empty + q, spare - r
  end
  if pour > 0 then lb_set(key, empty, spare, now, slack) end
  local _, rem, t, z = lb_peek(empty - now, spare, capacity, rate, unit)
  if pour < n then allowed = 2 end
  return allowed, rem, t, z
end

-- A refund drains up to n requests at once.
function refunds.leaky_bucket(key, n, now, slack, capacity, rate, _, unit)
  local empty, spare = lb_at(key, now, rate)
  if empty > now then
    if n >= lb_held(empty - now, spare, 1, rate, unit) then
      empty, spare = now, 0
    else
      -- n * unit = q * rate + r: the bucket empties q or q + 1 µs sooner.
      local q, r = muldiv(n, unit, rate)
      empty, spare = empty - q, spare + r
      if spare >= rate then empty, spare = empty - 1, spare - rate end
    end
    if empty <= now then redis.call('DEL', key) else lb_set(key, empty, spare, now, slack) end
  end
  return lb_peek(empty - now, spare, capacity, rate, unit)
end
