-- Leaky bucket (policing); the model is ratekeeper's leakybucket.go.
-- The level is the drain time left, in ticks: a request pours unit ticks,
-- and rate ticks drain each µs. key holds "<time the bucket is empty,
-- µs, rounded up>:<the ticks it was rounded up by>"; a level above
-- capacity holds a debt.
-- Parameters: capacity (ticks), rate (ticks per µs), and cost: unit,
-- the ticks per request.

-- lb_hold raises the level of a bucket, empty at empty with spare ticks,
-- to at least held ticks at t.
local function lb_hold(empty, spare, t, held, rate)
  if held <= 0 then return empty, spare end
  local q = math.ceil(held / rate) -- held ticks drain in q µs
  if empty - t > q then return empty, spare end -- more than held
  if empty > t and (empty - t) * rate - spare >= held then return empty, spare end
  return t + q, q * rate - held
end

-- lb_at returns the time the bucket is empty, its spare ticks, and the
-- holds still live at now. Each hold that expired by now, in order, kept
-- the level from draining below what it held until it expired.
local function lb_at(key, now, rate, unit)
  local base, holds = split_holds(redis.call('GET', key))
  local empty, spare = decode(base, 2)
  if not empty then return now, 0, nil end
  if spare > rate - 1 then spare = rate - 1 end
  local held = holds_units(holds) * unit
  local live = nil
  if holds then
    live = {}
    for _, h in ipairs(holds) do
      if h[1] <= now then
        empty, spare = lb_hold(empty, spare, h[1], held, rate)
        held = held - h[2] * unit
      else
        live[#live + 1] = h
      end
    end
  end
  empty, spare = lb_hold(empty, spare, now, held, rate)
  if empty <= now then return now, 0, live end
  return empty, spare, live
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

-- lb_fits returns how long before a bucket is empty need ticks fit in
-- it, with spare ticks: 0 for need 0, an empty bucket.
local function lb_fits(need, spare, capacity, rate)
  if need == 0 then return 0 end
  return math.floor((capacity - need + spare) / rate)
end

-- lb_when returns the earliest time, from now, at which need ticks fit
-- in the bucket, if nothing else happens: once it has drained enough, and
-- enough holds have expired for need to fit beside the others, each
-- expired one having kept the level up until it expired. With need 0, it
-- is when the bucket is empty.
local function lb_when(now, empty, spare, need, live, capacity, rate, unit)
  if not live then return math.max(now, empty - lb_fits(need, spare, capacity, rate)) end
  local held, from = holds_units(live) * unit, now
  for _, h in ipairs(live) do
    -- An empty bucket waits for every hold to expire.
    if need > 0 and held + need <= capacity then
      local at = math.max(from, empty - lb_fits(need, spare, capacity, rate))
      if at < h[1] then return at end
    end
    empty, spare = lb_hold(empty, spare, h[1], held, rate)
    held = held - h[2] * unit
    from = h[1]
  end
  return math.max(from, empty - lb_fits(need, spare, capacity, rate))
end

-- lb_outcome is the answer for a bucket empty at empty with spare ticks
-- and the live holds, for a request of need ticks.
local function lb_outcome(allowed, now, empty, spare, need, live, capacity, rate, unit)
  local wait = empty - now
  local retry_after = 0
  if allowed == 0 then retry_after = lb_when(now, empty, spare, need, live, capacity, rate, unit) - now end
  local reset_after = lb_when(now, empty, spare, 0, live, capacity, rate, unit) - now
  if wait > math.floor((capacity + spare) / rate) then
    -- In debt, at most MaxLimit (10^9) requests (a clock gone back may
    -- put the level higher than any debt).
    local remaining = (capacity / unit) * 1000000 - lb_held(wait, spare, 1000000, rate, unit)
    return allowed, math.max(remaining, -1000000000000000), retry_after, reset_after
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
  return allowed, whole * 1000000 + frac, retry_after, reset_after
end

-- lb_peek is the answer for a peek, a request of cost 1 that takes
-- nothing: what a charge or a refund reports.
local function lb_peek(now, empty, spare, live, capacity, rate, unit)
  local allowed = 0
  if empty - now <= math.floor((capacity - unit + spare) / rate) then allowed = 1 end
  return lb_outcome(allowed, now, empty, spare, unit, live, capacity, rate, unit)
end

-- lb_pour pours n requests into a bucket empty at empty with spare
-- ticks, and returns when it is empty then: n * unit = q * rate + r, so
-- q or q + 1 µs later.
local function lb_pour(empty, spare, n, rate, unit)
  local q, r = muldiv(n, unit, rate)
  if r > spare then return empty + q + 1, rate - r + spare end
  return empty + q, spare - r
end

-- lb_keep writes the bucket and its live holds, to expire when it is
-- empty and they have expired (reset_after from now); an empty bucket
-- without holds is a fresh one, and deleted.
local function lb_keep(key, now, empty, spare, live, reset_after, slack)
  if empty <= now and (not live or #live == 0) then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, string.format('%d:%d', empty, spare) .. holds_string(live), 'PX', math.ceil(reset_after / 1000) + slack)
end

-- lb_back drains up to n requests at once from a bucket empty at empty
-- (after now) with spare ticks, never below what the live holds hold.
local function lb_back(now, empty, spare, n, live, rate, unit)
  if n >= lb_held(empty - now, spare, 1, rate, unit) then
    empty, spare = now, 0
  else
    -- n * unit = q * rate + r: the bucket empties q or q + 1 µs sooner.
    local q, r = muldiv(n, unit, rate)
    empty, spare = empty - q, spare + r
    if spare >= rate then empty, spare = empty - 1, spare - rate end
  end
  return lb_hold(empty, spare, now, holds_units(live) * unit, rate)
end

function algorithms.leaky_bucket(key, take, n, now, slack, capacity, rate, _, unit)
  unit = unit + 0
  local need = n
  if need == 0 then need = 1 end
  local empty, spare, live = lb_at(key, now, rate, unit)
  local cost = need * unit
  -- The level leaves room for cost once wait <= fits.
  local fits = math.floor((capacity - cost + spare) / rate)
  local allowed = 0
  if empty - now <= fits then
    allowed = 1
    if take then empty, spare = lb_pour(empty, spare, need, rate, unit) end
  end
  local a, r, t, z = lb_outcome(allowed, now, empty, spare, cost, live, capacity, rate, unit)
  if allowed == 1 and take then lb_keep(key, now, empty, spare, live, z, slack) end
  return a, r, t, z
end

function charges.leaky_bucket(key, n, now, slack, capacity, rate, _, unit)
  unit = unit + 0
  local limit = capacity / unit
  local empty, spare, live = lb_at(key, now, rate, unit)
  local wait = empty - now
  local allowed = 0
  if n <= limit and wait <= math.floor((capacity - n * unit + spare) / rate) then allowed = 1 end
  local pour, held = n, lb_held(wait, spare, 1, rate, unit)
  if held + n > limit + 1 then -- the debt may pass its bound, at least 1
    pour = math.max(math.min(n, limit + lb_max_debt(rate, unit) - held), 0)
  end
  empty, spare = lb_pour(empty, spare, pour, rate, unit)
  local _, rem, t, z = lb_peek(now, empty, spare, live, capacity, rate, unit)
  if pour > 0 then lb_keep(key, now, empty, spare, live, z, slack) end
  if pour < n then allowed = 2 end
  return allowed, rem, t, z
end

-- A refund drains up to n requests at once, never below what the live
-- holds hold.
function refunds.leaky_bucket(key, n, now, slack, capacity, rate, _, unit)
  unit = unit + 0
  local empty, spare, live = lb_at(key, now, rate, unit)
  if empty > now then
    empty, spare = lb_back(now, empty, spare, n, live, rate, unit)
    if empty <= now then empty, spare = now, 0 end
    local a, r, t, z = lb_peek(now, empty, spare, live, capacity, rate, unit)
    lb_keep(key, now, empty, spare, live, z, slack)
    return a, r, t, z
  end
  return lb_peek(now, empty, spare, live, capacity, rate, unit)
end

-- A lease step (driver.Leaser): back's unused requests drain at once, as
-- a refund's do, and its hold goes; then a lease of up to want pours what
-- fits, at most half of it, and holds all of it but least, which its
-- request spends at once, until now + ttl.
function leases.leaky_bucket(key, now, slack, capacity, rate, _, unit, want, least, ttl, back_units, back_expires, unused)
  unit = unit + 0
  local empty, spare, live = lb_at(key, now, rate, unit)
  local changed = false
  local rest, found = holds_without(live, back_expires, back_units)
  if found and back_units > 0 then
    live = rest
    if empty > now then
      empty, spare = lb_back(now, empty, spare, unused, live, rate, unit)
      if empty <= now then empty, spare = now, 0 end
    end
    changed = true
  end
  local need = math.max(least, 1) * unit
  local allowed = 0
  local units, expires = 0, 0
  if empty - now <= math.floor((capacity - need + spare) / rate) then
    allowed = 1
    if want > 0 then
      local take = least
      if not holds_full(live) then
        -- At most half of what fits, so that other holders and Limiters
        -- without leases find some of it too.
        local room = math.floor((capacity - ((empty - now) * rate - spare)) / unit)
        take = math.min(want, math.max(least, 1, math.floor(room / 2)))
      end
      empty, spare = lb_pour(empty, spare, take, rate, unit)
      if take > least then
        units, expires = take - least, now + ttl
        live = holds_with(live, expires, units)
      end
      changed = true
    end
  end
  local a, r, t, z = lb_outcome(allowed, now, empty, spare, need, live, capacity, rate, unit)
  if changed then lb_keep(key, now, empty, spare, live, z, slack) end
  return units, expires, a, r, t, z
end
