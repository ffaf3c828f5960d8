-- Prepended to every script. Lua numbers are doubles: every value the
-- scripts compute is an integer below 2^53, so every step is exact and the
-- results equal those of ratekeeper's Go models, bit for bit. That holds
-- for division too: for integers 0 <= a < 2^53 and b >= 1,
-- math.floor(a / b) and math.ceil(a / b) are exact, because a quotient
-- that is not an integer lies at least 1/b from one, farther than the
-- rounding of a / b (at most a/b * 2^-53) can move it.
--
-- Each algorithm is a function in the table algorithms, under its name:
--
--   algorithms.<name>(key, take, n, now, slack, capacity, rate, interval,
--     cost)
--
-- key      the key that holds the state
-- take     whether to consume n when the request is allowed (never for a
--          peek); without take it writes nothing
-- n        the cost in whole requests (0 peeks: answer for a cost of 1)
-- now      the time in microseconds
-- slack    milliseconds added to every expiry
-- capacity, rate, interval, cost
--          the parameters (driver.Params), each algorithm reading those
--          it needs
--
-- and has two more, for costs known afterwards, in the tables charges and
-- refunds under the same name, with the same arguments but take, and n >
-- 0: charges.<name> takes n whether or not it fits, and may leave the key
-- in debt; refunds.<name> gives up to n back (see driver.Mode).
--
-- An algorithm that takes leases has a fourth, leases.<name>(key, now,
-- slack, capacity, rate, interval, cost, want, least, ttl, back_units,
-- back_expires, unused), the lease step of driver.Leaser, which returns
-- the lease taken (units, expires) before the four integers.
--
-- It returns allowed (1 or 0), remaining in millionths, retry after (µs)
-- and reset after (µs), all integers, so Redis truncates nothing; when
-- allowed without take, they describe the state as it is. A charge
-- returns allowed 1 if n fitted, 0 if not, and 2 if not and its debt met
-- the algorithm's bound (taken up to it), with remaining below zero by the
-- debt and retry after for a cost of 1; a refund answers as a peek after
-- it. The script ends with one of single.lua, batch.lua and all.lua,
-- which read ARGV and call the functions through run.
local algorithms, charges, refunds, leases = {}, {}, {}, {}

-- decode reads the k (1 to 3) integers of a stored "x:y:z", each below
-- 2^53; nil for anything else, which then counts as a fresh key. With
-- signed, the first may be below zero (a token bucket's tokens in debt).
local function decode(v, k, signed)
  if not v then return nil end
  local a, b, c
  if k == 1 then
    a = string.match(v, '^%d+$')
  elseif k == 2 then
    a, b = string.match(v, '^(-?%d+):(%d+)$')
  else
    a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  end
  if not a or (not signed and string.sub(a, 1, 1) == '-') then return nil end
  -- Digits (and a sign) only: "+ 0" reads them, and costs less than
  -- tonumber (a call).
  a = a + 0
  if k > 1 then b = b + 0 end
  if k > 2 then c = c + 0 end
  local big = 9007199254740992
  if a >= big or a <= -big or (k > 1 and b >= big) or (k > 2 and c >= big) then
    return nil
  end
  return a, b, c
end

-- clock reads ARGV's time: microseconds, or "" for the server's clock.
-- It returns nil and an error reply for a server clock outside the range
-- of driver.CheckTime, which redisstore applies to the times it supplies:
-- after 1970, before 2200.
local function clock(t)
  if t == '' then
    local tm = redis.call('TIME')
    local now = tm[1] * 1000000 + tm[2]
    if now >= 7258118400000000 then
      return nil, redis.error_reply('ratekeeper: the server clock reads ' .. tm[1] .. ' s, past 2200')
    end
    return now
  end
  return t + 0
end

-- run decides the request of one policy, named name, in mode (0 check,
-- 1 take, 2 charge, 3 refund: driver.Mode); n = 0 peeks in every mode.
local function run(name, mode, key, n, now, slack, capacity, rate, interval, cost)
  if n > 0 and mode == 2 then
    return charges[name](key, n, now, slack, capacity, rate, interval, cost)
  elseif n > 0 and mode == 3 then
    return refunds[name](key, n, now, slack, capacity, rate, interval, cost)
  end
  return algorithms[name](key, mode == 1 and n > 0, n, now, slack, capacity, rate, interval, cost)
end

-- Prepended, after lib.lua, to the scripts that need it.

-- floor(a * b / c) for a < 2^31 and b, c < 2^50, whose product may pass
-- 2^53: long division over the bits of a keeps every term below 2^52
-- (a product below 2^53 is divided at once). Also the remainder,
-- a * b - floor(a * b / c) * c.
local function muldiv(a, b, c)
  local p = a * b -- exact below 2^53, and at least 2^53 otherwise
  if p < 9007199254740992 then
    local q = math.floor(p / c)
    return q, p - q * c
  end
  local whole = math.floor(b / c)
  local frac = b - whole * c
  local q, r = 0, 0 -- a * frac = q * c + r, built bit by bit
  for i = 30, 0, -1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if math.floor(a / 2 ^ i) % 2 == 1 then
      r = r + frac
      if r >= c then q, r = q + 1, r - c end
    end
  end
  return a * whole + q, r
end

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

-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…7] capacity, rate, interval, cost
-- ARGV[8]   the mode: 1 take, 2 charge, 3 refund (0 check)
-- Returns its four integers.
local name = next(algorithms)
local now, err = clock(ARGV[2])
if not now then return err end
return {run(name, ARGV[8] + 0, KEYS[1], ARGV[1] + 0, now, ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0)}

