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
--          it needs; cost comes as a string, for a calendar window's
--          bounds ("b0:b1:b2:b3", see fixed_window.lua) to pass
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

-- Prepended, after lib.lua, to the scripts of algorithms that take leases.
-- A key's state may end with its holds, "|<expires>:<units>" each, in
-- order of expiry: what its leases hold until they expire (ratekeeper's
-- holds.go). A hold is a table {expires, units}.

-- split_holds splits a stored state into its base and its holds, nil for
-- a state without.
local function split_holds(v)
  if not v then return nil, nil end
  local bar = string.find(v, '|', 1, true)
  if not bar then return v, nil end
  local holds = {}
  for e, u in string.gmatch(string.sub(v, bar + 1), '(%d+):(%d+)') do
    holds[#holds + 1] = {e + 0, u + 0}
  end
  return string.sub(v, 1, bar - 1), holds
end

-- holds_units returns what the holds hold in all.
local function holds_units(holds)
  local sum = 0
  if holds then
    for _, h in ipairs(holds) do sum = sum + h[2] end
  end
  return sum
end

-- holds_without returns the holds less units of the one that expires at
-- expires, and whether there was one: a lease given back.
local function holds_without(holds, expires, units)
  if not holds then return holds, false end
  local out, found = {}, false
  for _, h in ipairs(holds) do
    if not found and h[1] == expires then
      found = true
      if h[2] > units then out[#out + 1] = {h[1], h[2] - units} end
    else
      out[#out + 1] = h
    end
  end
  return out, found
end

-- holds_with returns the holds with units more held until expires, in
-- order of expiry: a new lease, merged with one of the same expiry.
local function holds_with(holds, expires, units)
  local out, added = {}, false
  for _, h in ipairs(holds or {}) do
    if not added and h[1] == expires then
      out[#out + 1] = {h[1], h[2] + units}
      added = true
    else
      if not added and h[1] > expires then
        out[#out + 1] = {expires, units}
        added = true
      end
      out[#out + 1] = h
    end
  end
  if not added then out[#out + 1] = {expires, units} end
  return out
end

-- holds_full reports whether a key may take no new lease: it holds
-- MaxHolds (64).
local function holds_full(holds)
  return holds ~= nil and #holds >= 64
end

-- holds_string is the suffix that keeps the holds in a state string.
local function holds_string(holds)
  if not holds or #holds == 0 then return '' end
  local parts = {}
  for i, h in ipairs(holds) do parts[i] = string.format('|%d:%d', h[1], h[2]) end
  return table.concat(parts)
end

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

-- Several callers' requests under the one algorithm this script holds, in
-- one script call: the pipeliner sends a batch of them this way, so that
-- Redis runs one script, and reads its clock once, for the whole batch.
-- KEYS[i]  the i-th request's key
-- ARGV[1]  milliseconds added to every expiry
-- ARGV[2]  k, the number of distinct parameter sets of the requests
-- then     each set's capacity, rate, interval and cost (single.lua's
--          ARGV[4…7]), four values each
-- then     four values per request, in order: its cost n, its time (""
--          for the server's), its parameter set (1 to k) and its mode
--          (single.lua's ARGV[8])
-- Requests are decided one after the other, at the server's time read
-- once: as if they had arrived in that order in the same microsecond.
-- Returns one flat array, four values per request: its four integers,
-- or, for a request that met an error (a key of another type, a write
-- refused with OOM or READONLY), its message as a plain string, then
-- three zeros: one request's error fails only that request. Never an
-- error reply inside the array: a client may stop reading the array at
-- one (go-redis does, at OOM, READONLY and other errors it knows), and
-- read the rest of it as the replies of the next commands. Flat, and the
-- parameters sent once per set: a table per request, and parameters
-- read per request, cost Redis more.
local name = next(algorithms)
local slack, sets = ARGV[1] + 0, ARGV[2] + 0
local params = {}
for k = 1, sets do
  local at = 3 + (k - 1) * 4
  params[k] = {ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0, ARGV[at + 3]}
end
local first = 3 + sets * 4
local server_now
local out = {}
for i = 1, #KEYS do
  local at = first + (i - 1) * 4
  local n, now = ARGV[at] + 0, ARGV[at + 1]
  if now == '' then
    if not server_now then
      local err
      server_now, err = clock('')
      if not server_now then return err end
    end
    now = server_now
  else
    now = now + 0
  end
  local p = params[ARGV[at + 2] + 0]
  local ok, a, r, t, z = pcall(run, name, ARGV[at + 3] + 0, KEYS[i], n, now, slack,
    p[1], p[2], p[3], p[4])
  if not ok then
    if type(a) == 'table' and a.err then a = a.err end
    a, r, t, z = tostring(a), 0, 0, 0
  end
  local o = 4 * i
  out[o - 3], out[o - 2], out[o - 1], out[o] = a, r, t, z
end
return out

