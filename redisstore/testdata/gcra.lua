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

-- GCRA; the model is ratekeeper's gcra.go.
-- key holds the theoretical arrival time (µs), an integer string; beyond
-- now + burst * interval, it holds a debt.
-- Parameters: burst (capacity), emission interval (µs).

-- gcra_max_debt is the largest debt: what the key repays in MaxPeriod (10
-- years), at most MaxLimit (10^9) requests.
local function gcra_max_debt(interval)
  return math.min(math.floor(315360000000000 / interval), 1000000000)
end

-- gcra_at returns the theoretical arrival time at now, and the holds
-- still live at now. Each hold that expired by now, in order, held its
-- units until it expired: the time is at least its expiry plus what was
-- held until then.
local function gcra_at(key, now, interval)
  local base, holds = split_holds(redis.call('GET', key))
  local tat = decode(base, 1)
  if not tat or tat < now then tat = now end
  if not holds then return tat, nil end
  local held = holds_units(holds)
  local live = {}
  for _, h in ipairs(holds) do
    if h[1] <= now then
      tat = math.max(tat, h[1] + held * interval)
      held = held - h[2]
    else
      live[#live + 1] = h
    end
  end
  return math.max(tat, now + held * interval), live
end

-- gcra_reset returns when a key at tat, with the live holds, is full
-- again if nothing else happens: once each hold expired.
local function gcra_reset(interval, tat, live)
  if not live then return tat end
  local held = holds_units(live)
  for _, h in ipairs(live) do
    tat = math.max(tat, h[1] + held * interval)
    held = held - h[2]
  end
  return tat
end

-- gcra_retry returns the earliest time at which a request of cost need
-- could pass, at tat with the live holds: once tat has come within the
-- tolerance, and enough holds have expired for need to fit beside the
-- others, each expired one having held its units until it expired.
local function gcra_retry(now, tat, need, burst, interval, live)
  local tolerance = burst * interval
  if not live then return math.max(now, tat + need * interval - tolerance) end
  local held, from = holds_units(live), now
  for _, h in ipairs(live) do
    local at = math.max(from, tat + need * interval - tolerance)
    if held <= burst - need and at < h[1] then return at end
    tat = math.max(tat, h[1] + held * interval)
    held = held - h[2]
    from = h[1]
  end
  return math.max(from, tat + need * interval - tolerance)
end

-- gcra_outcome is the answer at tat, with the live holds, for a request
-- of cost need; remaining is below zero by a debt.
local function gcra_outcome(allowed, tat, need, now, burst, interval, live)
  local tolerance = burst * interval
  local retry_after = 0
  if allowed == 0 then retry_after = gcra_retry(now, tat, need, burst, interval, live) - now end
  -- Below zero by a debt, at most gcra_max_debt (or while a clock gone
  -- back keeps tat further ahead).
  local remaining = math.max(math.floor((tolerance - (tat - now)) / interval), -gcra_max_debt(interval))
  return allowed, remaining * 1000000, retry_after, gcra_reset(interval, tat, live) - now
end

-- gcra_peek is the answer at tat for a peek, a request of cost 1 that
-- takes nothing: what a charge or a refund reports.
local function gcra_peek(tat, now, burst, interval, live)
  local allowed = 0
  if tat + interval - now <= burst * interval then allowed = 1 end
  return gcra_outcome(allowed, tat, 1, now, burst, interval, live)
end

-- gcra_keep writes tat and the live holds, to expire when the key is full
-- again (reset_after from now); a key at or before now without holds is
-- fresh, and deleted.
local function gcra_keep(key, now, tat, live, reset_after, slack)
  if tat <= now and (not live or #live == 0) then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, string.format('%d', tat) .. holds_string(live), 'PX', math.ceil(reset_after / 1000) + slack)
end

-- gcra_back moves tat up to n intervals back, never before now plus what
-- the live holds hold.
local function gcra_back(now, tat, n, live, interval)
  local floor = now + holds_units(live) * interval
  -- Compared before multiplying: n * interval may pass 2^53.
  if tat <= floor or n >= math.ceil((tat - floor) / interval) then return floor end
  return tat - n * interval
end

function algorithms.gcra(key, take, n, now, slack, burst, _, interval)
  local need = n
  if need == 0 then need = 1 end
  local tat, live = gcra_at(key, now, interval)
  local next_tat = tat + need * interval
  local allowed = 0
  if next_tat - now <= burst * interval then
    allowed = 1
    if take then tat = next_tat end
  end
  local a, r, t, z = gcra_outcome(allowed, tat, need, now, burst, interval, live)
  if allowed == 1 and take then gcra_keep(key, now, tat, live, z, slack) end
  return a, r, t, z
end

function charges.gcra(key, n, now, slack, burst, _, interval)
  local tat, live = gcra_at(key, now, interval)
  -- Compared before multiplying: n * interval may pass 2^53.
  local most = now + (burst + gcra_max_debt(interval)) * interval
  local capped = n > math.floor((most - tat) / interval)
  local next_tat = math.max(tat, most)
  if not capped then next_tat = tat + n * interval end
  local allowed = 0
  if next_tat - now <= burst * interval then allowed = 1 end -- never when capped
  local _, r, t, z = gcra_peek(next_tat, now, burst, interval, live)
  gcra_keep(key, now, next_tat, live, z, slack)
  if capped then allowed = 2 end
  return allowed, r, t, z
end

function refunds.gcra(key, n, now, slack, burst, _, interval)
  local tat, live = gcra_at(key, now, interval)
  local changed = tat > now + holds_units(live) * interval
  if changed then tat = gcra_back(now, tat, n, live, interval) end
  local a, r, t, z = gcra_peek(tat, now, burst, interval, live)
  if changed then gcra_keep(key, now, tat, live, z, slack) end
  return a, r, t, z
end

-- A lease step (driver.Leaser): back's unused units come back as a
-- refund's do, and its hold goes; then a lease of up to want takes what
-- fits, and holds all of it but least, which its request spends at once,
-- until now + ttl. Returns the lease's units and expiry, then the four
-- integers of a take of least.
function leases.gcra(key, now, slack, burst, _, interval, _, want, least, ttl, back_units, back_expires, unused)
  local tolerance = burst * interval
  local tat, live = gcra_at(key, now, interval)
  local changed = false
  local rest, found = holds_without(live, back_expires, back_units)
  if found and back_units > 0 then
    live = rest
    tat = gcra_back(now, tat, unused, live, interval)
    changed = true
  end
  local need = math.max(least, 1)
  local next_tat = tat + need * interval
  local allowed = 0
  if next_tat - now <= tolerance then allowed = 1 end
  local units, expires = 0, 0
  if allowed == 1 and want > 0 then
    local take = least
    if not holds_full(live) then
      -- At most half of what fits, so that other holders and Limiters
      -- without leases find some of it too.
      take = math.min(want, math.max(least, 1, math.floor(math.floor((now + tolerance - tat) / interval) / 2)))
    end
    tat = tat + take * interval
    if take > least then
      units, expires = take - least, now + ttl
      live = holds_with(live, expires, units)
    end
    changed = true
  end
  local a, r, t, z = gcra_outcome(allowed, tat, need, now, burst, interval, live)
  if changed then gcra_keep(key, now, tat, live, z, slack) end
  return units, expires, a, r, t, z
end

-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…7] capacity, rate, interval, cost (a string the algorithm reads:
--           a calendar window's bounds)
-- ARGV[8]   the mode: 1 take, 2 charge, 3 refund (0 check)
-- Returns its four integers.
local name = next(algorithms)
local now, err = clock(ARGV[2])
if not now then return err end
return {run(name, ARGV[8] + 0, KEYS[1], ARGV[1] + 0, now, ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7])}

