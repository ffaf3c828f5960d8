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

-- Fixed window; the model is ratekeeper's fixedwindow.go.
-- key holds "<count, above limit by a debt>:<start of the window, µs>",
-- or a calendar window's "<count>:<end of the window, µs>"; a key that
-- lost its expiry is repaired once its window is over.
-- Parameters: limit, aligned (1 for windows aligned to the epoch, 2 for
-- calendar periods, else 0), window (µs; a calendar period's longest),
-- and for calendar periods, bounds: "b0:b1:b2:b3", four consecutive ends
-- of periods around the caller's clock (driver.PeriodEnds), of which the
-- window is the period that contains now.

-- fw_at returns the count, the start and the end of the window at now,
-- or nil and an error reply when no period of bounds contains now.
local function fw_at(key, now, aligned, window, bounds)
  local v = redis.call('GET', key)
  if aligned == 2 then
    local b = {string.match(bounds, '^(%d+):(%d+):(%d+):(%d+)$')}
    local start, finish
    for i = 1, 3 do
      if b[i] + 0 <= now and now < b[i + 1] + 0 then start, finish = b[i] + 0, b[i + 1] + 0 end
    end
    if not start then
      return nil, redis.error_reply('ratekeeper: the server clock is more than a calendar period away from the caller\'s')
    end
    local c, e = decode(v, 2)
    if c and now < e then -- the window of the state, which the clock may be behind
      if e ~= finish then
        start, finish = e, e
        for i = 2, 4 do
          if b[i] + 0 == e then start = b[i - 1] + 0 end
        end
      end
      return c, start, finish
    end
    return 0, start, finish
  end
  local count, start = 0, now
  if aligned == 1 then start = now - now % window end
  local c, s = decode(v, 2)
  if c and now < s + window then count, start = c, s end -- or the clock is behind its start
  return count, start, start + window
end

-- fw_outcome is the answer for a request of cost need on the count of a
-- window that ends at finish.
local function fw_outcome(count, finish, need, now, limit)
  local allowed, retry_after, reset_after = 1, 0, 0
  if count + need > limit then
    allowed, retry_after = 0, finish - now -- the next window admits any cost up to Limit
  end
  if count > 0 then reset_after = finish - now end
  return allowed, (limit - count) * 1000000, retry_after, reset_after
end

-- fw_set writes the count, to expire at the window's end, with its start
-- (or a calendar window's end).
local function fw_set(key, count, start, finish, aligned, now, slack)
  local mark = start
  if aligned == 2 then mark = finish end
  redis.call('SET', key, string.format('%d:%d', count, mark), 'PX', math.ceil((finish - now) / 1000) + slack)
end

function algorithms.fixed_window(key, take, n, now, slack, limit, aligned, window, bounds)
  local need = n
  if need == 0 then need = 1 end
  local count, start, finish = fw_at(key, now, aligned, window, bounds)
  if not count then error(start) end
  if take and count + n <= limit then
    count = count + n
    fw_set(key, count, start, finish, aligned, now, slack)
    return fw_outcome(count, finish, 0, now, limit)
  end
  return fw_outcome(count, finish, need, now, limit)
end

-- The largest debt: MaxLimit (10^9) requests beyond the limit, which the
-- window forgets at its end.
function charges.fixed_window(key, n, now, slack, limit, aligned, window, bounds)
  local count, start, finish = fw_at(key, now, aligned, window, bounds)
  if not count then error(start) end
  local fitted = count + n <= limit
  local capped
  count, capped = charge_count(count, n, limit)
  fw_set(key, count, start, finish, aligned, now, slack)
  local a, r, t, z = fw_outcome(count, finish, 1, now, limit)
  if fitted then a = 1 elseif capped then a = 2 else a = 0 end
  return a, r, t, z
end

function refunds.fixed_window(key, n, now, slack, limit, aligned, window, bounds)
  local count, start, finish = fw_at(key, now, aligned, window, bounds)
  if not count then error(start) end
  if count > 0 then
    count = math.max(count - n, 0)
    if count == 0 then redis.call('DEL', key) else fw_set(key, count, start, finish, aligned, now, slack) end
  end
  return fw_outcome(count, finish, 1, now, limit)
end

-- A lease step (driver.Leaser). A window needs no holds: a lease takes
-- its units into the count, and expires at the window's end if that comes
-- before its ttl, so every unit leased is spent in the window that counted
-- it. back's unused units come back to the count if its lease was taken in
-- this window (it expires after this window's start).
function leases.fixed_window(key, now, slack, limit, aligned, window, bounds, want, least, ttl, back_units, back_expires, unused)
  local count, start, finish = fw_at(key, now, aligned, window, bounds)
  if not count then error(start) end
  local changed = false
  if back_units > 0 and unused > 0 and count > 0 and back_expires > start and back_expires <= finish then
    count = math.max(count - unused, 0)
    changed = true
  end
  local need = math.max(least, 1)
  local units, expires = 0, 0
  if want > 0 and count + need <= limit then
    -- At most half of what is left, so that other holders and Limiters
    -- without leases find some of it too.
    local take = math.min(want, math.max(least, 1, math.floor((limit - count) / 2)))
    if take > least then units, expires = take - least, math.min(now + ttl, finish) end
    count = count + take
    need, changed = 0, true
  end
  if changed then
    if count == 0 then redis.call('DEL', key) else fw_set(key, count, start, finish, aligned, now, slack) end
  end
  local a, r, t, z = fw_outcome(count, finish, need, now, limit)
  return units, expires, a, r, t, z
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

-- Sliding window log; the model is ratekeeper's slidinglog.go.
-- key is a sorted set of the requests admitted, one entry per request (or
-- per microsecond, when several come in one), scored by its time (µs),
-- with member "<start>+<cost>": start is the cost admitted before it,
-- modulo span, so the cost in the window is read from the oldest entry
-- and the newest. Every entry costs at least 1, so a key holds at most
-- limit entries: a call adds an entry only when none is out of the window,
-- and drops at least one otherwise; a charge into a window of limit
-- entries adds to the newest.
-- Parameters: limit, window (µs).

local span = 1000000000000000 -- 10^15
local log_drop = 1000 -- the most entries one call drops

-- log_entry reads the entry of rank i: its time, start and cost; nil if
-- there is none, false if it is of another format.
local function log_entry(key, i)
  local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  if not r[1] then return nil end
  local start, cost = string.match(r[1], '^(%d+)%+(%d+)$')
  if not start then return false end
  return r[2] + 0, start + 0, cost + 0
end

-- log_up_to returns the cost of the entries from the one of first_start
-- to the one of start and cost, inclusive.
local function log_up_to(first_start, start, cost)
  return (start + cost - first_start) % span
end

-- log_at drops the entries out of the window, at most log_drop of them,
-- so that no call does much more work than another: any left over lie
-- before rank first, count for nothing, and go in the calls that follow.
-- It returns first, the oldest entry in the window and the newest (nil if
-- none), and the cost in the window.
local function log_at(key, now, window)
  local first = redis.call('ZCOUNT', key, '-inf', now - window)
  local dropped = math.min(first, log_drop)
  if dropped > 0 then redis.call('ZREMRANGEBYRANK', key, 0, dropped - 1) end
  first = first - dropped
  local first_at, first_start = log_entry(key, first)
  local last_at, last_start, last_cost
  if first_at then last_at, last_start, last_cost = log_entry(key, -1) end
  if first_at == false or last_at == false then
    -- Written in another format: start the log over.
    redis.call('DEL', key)
    first, first_at, last_at = 0, nil, nil
  end
  local used = 0 -- the cost in the window
  if first_at then used = log_up_to(first_start, last_start, last_cost) end
  return first, first_at, first_start, last_at, last_start, last_cost, used
end

-- log_retry waits until enough of the oldest entries have left: the
-- first that covers the excess with those before it. It is at most the
-- excess-th, as every entry costs at least 1: a binary search over ranks
-- finds it in at most log2(excess) + 1 reads.
local function log_retry(key, first, first_at, first_start, excess, now, window)
  local lo, hi, at = first, first + excess - 1, nil
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local t, s, c = log_entry(key, mid)
    if not t or log_up_to(first_start, s, c) >= excess then hi, at = mid, t else lo = mid + 1 end
  end
  if lo == first then at = first_at elseif not at then at = log_entry(key, lo) end
  return at + window - now
end

-- log_add adds cost at now: to the newest entry when it is at now or
-- later (the clock went back) or merge is set, else as a new entry. It
-- returns the newest entry's time, and whether it added to it.
local function log_add(key, last_at, last_start, last_cost, cost, now, merge)
  if last_at and (last_at >= now or merge) then
    redis.call('ZREM', key, string.format('%d+%d', last_start, last_cost))
    last_cost = last_cost + cost
    if last_at < now then last_at = now end
    redis.call('ZADD', key, last_at, string.format('%d+%d', last_start, last_cost))
    return last_at, true
  end
  if last_at then last_start = (last_start + last_cost) % span else last_start = 0 end
  redis.call('ZADD', key, now, string.format('%d+%d', last_start, cost))
  return now, false
end

function algorithms.sliding_window_log(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local allowed = 0
  if used + need <= limit then
    allowed = 1
    if take then
      -- The same microsecond, or the clock went back: one entry, so that
      -- entries stay in time order.
      last_at = log_add(key, last_at, last_start, last_cost, n, now, false)
      used = used + n
    end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = log_retry(key, first, first_at, first_start, used + need - limit, now, window)
  end
  if last_at then
    reset_after = last_at + window - now
    if allowed == 1 and take then redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack) end
  end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
end

-- The largest debt: MaxLimit (10^9) units beyond the limit, far below
-- span; they leave the window with their entries.
function charges.sliding_window_log(key, n, now, slack, limit, _, window)
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local allowed = 0
  if used + n <= limit then allowed = 1 end
  local take = math.max(math.min(n, limit + 1000000000 - used), 0)
  if take > 0 then
    -- A window of limit entries adds to its newest, which then counts
    -- from now: the log never holds more than limit entries.
    -- A window holds at most used entries: it is counted only when it
    -- may hold limit.
    local full = used >= limit and redis.call('ZCARD', key) - first >= limit
    local merged
    last_at, merged = log_add(key, last_at, last_start, last_cost, take, now, full)
    if not first_at then
      first_at, first_start = last_at, 0
    elseif merged and first_start == last_start then
      first_at = last_at -- the oldest entry is the newest, moved
    end
    used = used + take
  end
  local retry_after = 0
  if used + 1 > limit then -- for a request of cost 1
    retry_after = log_retry(key, first, first_at, first_start, used + 1 - limit, now, window)
  end
  local reset_after = 0
  if last_at then
    reset_after = last_at + window - now
    redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack)
  end
  if take < n then allowed = 2 end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
end

-- A refund takes its units back from the newest entries in the window.
function refunds.sliding_window_log(key, n, now, slack, limit, _, window)
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local back = math.min(n, used)
  used = used - back
  while back > 0 do
    redis.call('ZREM', key, string.format('%d+%d', last_start, last_cost))
    if last_cost > back then
      redis.call('ZADD', key, last_at, string.format('%d+%d', last_start, last_cost - back))
      back = 0
    else
      back = back - last_cost
      if used > 0 or back > 0 then last_at, last_start, last_cost = log_entry(key, -1) end
    end
  end
  local allowed, retry_after, reset_after = 1, 0, 0
  if used > 0 then
    reset_after = last_at + window - now
    if used + 1 > limit then
      allowed = 0
      retry_after = log_retry(key, first, first_at, first_start, used + 1 - limit, now, window)
    end
  end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
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

-- Several policies decided at once, all or nothing: the policies of one
-- caller (ratekeeper.All), or those of several callers' requests
-- (Store.DecideAll). Either every part takes its cost, or none takes
-- anything, but for charges and refunds, which always count. A peek
-- (cost 0) takes nothing, so it denies the others only while its key is
-- in debt.
-- KEYS[i]  the state of the i-th part
-- ARGV[1]  now in microseconds, or "" to read the server's clock
-- ARGV[2]  milliseconds added to every expiry
-- ARGV[3]  the mode of every part, or one digit per part: 1 take; 2
--          charge; 3 refund; 4 take, but charged when the cost does not
--          fit (driver.Request's ChargeOver)
-- ARGV[4…] six values per part: its algorithm's name, its cost n in whole
--          requests (0 peeks), capacity, rate, interval and cost
-- Returns the four integers of every part, in order.

local now, err = clock(ARGV[1])
if not now then return err end
local slack, modes = ARGV[2] + 0, ARGV[3]

-- decide decides part i in mode m (0 check, 1 take, 2 charge, 3 refund).
local function decide(i, m)
  local at = 6 * i - 2
  return run(ARGV[at], m, KEYS[i], ARGV[at + 1] + 0, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5])
end

-- takes reports whether part i has a cost to take: a peek only decides.
local function takes(i) return ARGV[6 * i - 1] ~= '0' end

-- mode is part i's mode (ARGV[3]); a peek's is 1, in every mode.
local function mode(i)
  if not takes(i) then return 1 end
  if #modes == 1 then return modes + 0 end
  return string.byte(modes, i) - 48
end

-- denies reports whether part i, which answered allowed a and remaining
-- r, denies the others: a refund never does, a peek only in debt.
local function denies(i, a, r)
  if not takes(i) then return r < 0 end
  return a ~= 1 and mode(i) ~= 3
end

-- set writes part i's four integers into into.
local function set(into, i, a, r, t, z)
  into[4 * i - 3], into[4 * i - 2], into[4 * i - 1], into[4 * i] = a, r, t, z
end

local shared, seen = false, {}
for i = 1, #KEYS do
  if seen[KEYS[i]] then shared = true end
  seen[KEYS[i]] = true
end

local out, allowed = {}, true
if not shared then
  -- First decide without taking (charges and refunds count at once): a
  -- part that denies leaves the others untouched. Then take from all, if
  -- all allow; else charge each part of mode 4 that did not fit.
  for i = 1, #KEYS do
    local m, now_mode = mode(i), 0
    if m == 2 or m == 3 then now_mode = m end
    local a, r, t, z = decide(i, now_mode)
    set(out, i, a, r, t, z)
    if denies(i, a, r) then allowed = false end
  end
  for i = 1, #KEYS do
    local m = mode(i)
    if takes(i) and (m == 1 or m == 4) then
      if allowed then
        set(out, i, decide(i, 1))
      elseif m == 4 and out[4 * i - 3] ~= 1 then
        set(out, i, decide(i, 2))
      end
    end
  end
  return out
end

-- Parts that share a key see each other's takes: they go one after the
-- other, each decided, then taken if allowed. If one denies, every key is
-- put back as it was (DUMP and RESTORE, with its expiry), each part
-- reports its decision without its take, and the charges and refunds are
-- made again, in order, with the charges of mode 4 parts that did not
-- fit.
local saved, order, peeks = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if not saved[key] then
    saved[key] = {redis.call('DUMP', key), redis.call('PTTL', key)}
    order[#order + 1] = key
  end
  local m = mode(i)
  local a, r, t, z
  if m == 2 or m == 3 then
    a, r, t, z = decide(i, m)
    set(out, i, a, r, t, z)
  else
    a, r, t, z = decide(i, 0)
    if a == 1 and takes(i) then
      set(out, i, decide(i, 1))
    else
      set(out, i, a, r, t, z)
    end
  end
  set(peeks, i, a, r, t, z)
  if denies(i, a, r) then allowed = false end
end
if allowed then return out end
for _, key in ipairs(order) do
  local dump, ttl = saved[key][1], saved[key][2]
  if dump then
    -- PTTL: -1 without an expiry (RESTORE's 0), else at least 1 ms.
    if ttl < 0 then ttl = 0 elseif ttl == 0 then ttl = 1 end
    redis.call('RESTORE', key, ttl, dump, 'REPLACE')
  else
    redis.call('DEL', key)
  end
end
for i = 1, #KEYS do
  local m = mode(i)
  if m == 2 or m == 3 then
    set(peeks, i, decide(i, m))
  elseif m == 4 and peeks[4 * i - 3] ~= 1 then
    set(peeks, i, decide(i, 2))
  end
end
return peeks

