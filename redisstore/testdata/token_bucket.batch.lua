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

