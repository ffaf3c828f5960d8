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

-- Prepended, after lib.lua, to the scripts that need it.

-- charge_count adds n to a window's count, up to limit plus MaxLimit (10^9)
-- requests of debt, never lowering a count already above that, and
-- reports whether it was capped: ratekeeper's chargeCount.
local function charge_count(count, n, limit)
  local most = math.max(limit + 1000000000, count)
  if count + n > most then return most, true end
  return count + n, false
end

-- Sliding window counter; the model is ratekeeper's slidingcounter.go.
-- key holds "<start of the current window, µs>:<previous count>:<current
-- count>", counts above limit holding a debt. Parameters: limit, window
-- (µs).

-- swc_at returns the start of the window at now and the two counts.
local function swc_at(key, now, window)
  local start = math.floor(now / window) * window
  local prev, curr = 0, 0
  local s, p, c = decode(redis.call('GET', key), 3)
  if s then
    if s >= start then -- this window (or the clock went back)
      start, prev, curr = s, p, c
    elseif s == start - window then
      prev = c
    end
  end
  return start, prev, curr
end

-- swc_weight is ceil(prev * (window - r) / window): the previous window's
-- weight at offset r, rounded up, which is exact for comparing with whole
-- requests.
local function swc_weight(prev, now, start, window)
  local r = now - start
  if r < 0 then r = 0 end
  return prev - muldiv(prev, r, window)
end

-- swc_outcome is the answer for a request of cost need; remaining is
-- below zero by a debt.
local function swc_outcome(allowed, start, prev, curr, weighted, need, now, limit, window)
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    -- The first offset at which prev's weight fits in room, if it comes in
    -- this window; else the first in the next, where curr is prev.
    local room = limit - curr - need
    local at = window
    if room >= 0 then at = window - muldiv(room, window, prev) end
    if at < window then
      retry_after = start + at - now
    else
      at = 0
      local spare = limit - need
      if curr > spare then at = window - muldiv(spare, window, curr) end
      retry_after = start + window + at - now
    end
  end
  if curr > 0 then
    reset_after = start + 2 * window - now
  elseif prev > 0 then
    reset_after = start + window - now
  end
  -- Below zero by a debt (or while a clock gone back weighs prev more, at
  -- most -MaxLimit, as a debt).
  local remaining = math.max(limit - curr - weighted, -1000000000)
  return allowed, remaining * 1000000, retry_after, reset_after
end

-- swc_fits reports (1 or 0) whether a request of cost need fits.
local function swc_fits(curr, weighted, need, limit)
  local room = limit - curr - need
  if room >= 0 and weighted <= room then return 1 end
  return 0
end

-- swc_set writes the counts, to expire when both have left.
local function swc_set(key, start, prev, curr, reset_after, slack)
  redis.call('SET', key, string.format('%d:%d:%d', start, prev, curr), 'PX', math.ceil(reset_after / 1000) + slack)
end

function algorithms.sliding_window_counter(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  local start, prev, curr = swc_at(key, now, window)
  local weighted = swc_weight(prev, now, start, window)
  local allowed = swc_fits(curr, weighted, need, limit)
  if allowed == 1 and take then curr = curr + n end
  local a, r, t, z = swc_outcome(allowed, start, prev, curr, weighted, need, now, limit, window)
  if allowed == 1 and take then swc_set(key, start, prev, curr, z, slack) end
  return a, r, t, z
end

-- The largest debt: MaxLimit (10^9) requests beyond the limit, counted
-- by the estimate (curr + weighted), so that every count stays below
-- 2^31, as muldiv needs; repaid within two windows.
function charges.sliding_window_counter(key, n, now, slack, limit, _, window)
  local start, prev, curr = swc_at(key, now, window)
  local weighted = swc_weight(prev, now, start, window)
  local allowed = swc_fits(curr, weighted, n, limit)
  local capped
  curr, capped = charge_count(curr, n, limit - weighted)
  local _, r, t, z = swc_outcome(swc_fits(curr, weighted, 1, limit), start, prev, curr, weighted, 1, now, limit, window)
  swc_set(key, start, prev, curr, z, slack)
  if capped then allowed = 2 end
  return allowed, r, t, z
end

-- A refund takes from the current window's count first, then from the
-- previous one's.
function refunds.sliding_window_counter(key, n, now, slack, limit, _, window)
  local start, prev, curr = swc_at(key, now, window)
  if prev + curr > 0 then
    local back = math.min(n, curr)
    curr = curr - back
    prev = math.max(prev - (n - back), 0)
  end
  local weighted = swc_weight(prev, now, start, window)
  local a, r, t, z = swc_outcome(swc_fits(curr, weighted, 1, limit), start, prev, curr, weighted, 1, now, limit, window)
  if prev + curr > 0 then swc_set(key, start, prev, curr, z, slack) elseif z == 0 then redis.call('DEL', key) end
  return a, r, t, z
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

