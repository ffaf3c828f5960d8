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
