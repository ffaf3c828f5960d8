-- GCRA; the model is ratekeeper's gcra.go.
-- key holds the theoretical arrival time (µs), an integer string; beyond
-- now + burst * interval, it holds a debt.
-- Parameters: burst (capacity), emission interval (µs).

-- gcra_max_debt is the largest debt: what the key repays in MaxPeriod (10
-- years), at most MaxLimit (10^9) requests.
local function gcra_max_debt(interval)
  return math.min(math.floor(315360000000000 / interval), 1000000000)
end

-- gcra_at returns the theoretical arrival time at now.
local function gcra_at(key, now)
  local tat = decode(redis.call('GET', key), 1)
  if not tat or tat < now then tat = now end
  return tat
end

-- gcra_outcome is the answer at tat for a request that would move it to
-- next_tat; remaining is below zero by a debt.
local function gcra_outcome(allowed, tat, next_tat, now, burst, interval)
  local tolerance = burst * interval
  local retry_after = 0
  if allowed == 0 then retry_after = next_tat - tolerance - now end
  -- Below zero by a debt, at most gcra_max_debt (or while a clock gone
  -- back keeps tat further ahead).
  local remaining = math.max(math.floor((tolerance - (tat - now)) / interval), -gcra_max_debt(interval))
  return allowed, remaining * 1000000, retry_after, tat - now
end

-- gcra_peek is the answer at tat for a peek, a request of cost 1 that
-- takes nothing: what a charge or a refund reports.
local function gcra_peek(tat, now, burst, interval)
  local next_tat = tat + interval
  local allowed = 0
  if next_tat - now <= burst * interval then allowed = 1 end
  return gcra_outcome(allowed, tat, next_tat, now, burst, interval)
end

-- gcra_set writes tat, to expire when it is reached.
local function gcra_set(key, tat, now, slack)
  redis.call('SET', key, string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
end

function algorithms.gcra(key, take, n, now, slack, burst, _, interval)
  local need = n
  if need == 0 then need = 1 end
  local tat = gcra_at(key, now)
  local next_tat = tat + need * interval
  local allowed = 0
  if next_tat - now <= burst * interval then
    allowed = 1
    if take then
      tat = next_tat
      gcra_set(key, tat, now, slack)
    end
  end
  return gcra_outcome(allowed, tat, next_tat, now, burst, interval)
end

function charges.gcra(key, n, now, slack, burst, _, interval)
  local tat = gcra_at(key, now)
  -- Compared before multiplying: n * interval may pass 2^53.
  local most = now + (burst + gcra_max_debt(interval)) * interval
  local capped = n > math.floor((most - tat) / interval)
  local next_tat = math.max(tat, most)
  if not capped then next_tat = tat + n * interval end
  local allowed = 0
  if next_tat - now <= burst * interval then allowed = 1 end -- never when capped
  gcra_set(key, next_tat, now, slack)
  local _, r, t, z = gcra_peek(next_tat, now, burst, interval)
  if capped then allowed = 2 end
  return allowed, r, t, z
end

function refunds.gcra(key, n, now, slack, burst, _, interval)
  local tat = gcra_at(key, now)
  if tat > now then
    -- Compared before multiplying: n * interval may pass 2^53.
    if n >= math.ceil((tat - now) / interval) then
      tat = now
      redis.call('DEL', key)
    else
      tat = tat - n * interval
      gcra_set(key, tat, now, slack)
    end
  end
  return gcra_peek(tat, now, burst, interval)
end
