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
