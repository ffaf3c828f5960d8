-- Fixed window; the model is ratekeeper's fixedwindow.go.
-- key holds "<count, above limit by a debt>:<start of the window, µs>"; a
-- key that lost its expiry is repaired once its window is over.
-- Parameters: limit, aligned (1 for windows aligned to the epoch, else 0),
-- window (µs).

-- fw_at returns the count and the start of the window at now.
local function fw_at(key, now, aligned, window)
  local count, start = 0, now
  if aligned == 1 then start = now - now % window end
  local c, s = decode(redis.call('GET', key), 2)
  if c and now < s + window then count, start = c, s end -- or the clock is behind its start
  return count, start
end

-- fw_outcome is the answer for a request of cost need.
local function fw_outcome(count, start, need, now, limit, window)
  local allowed, retry_after, reset_after = 1, 0, 0
  if count + need > limit then
    allowed, retry_after = 0, start + window - now -- the next window admits any cost up to Limit
  end
  if count > 0 then reset_after = start + window - now end
  return allowed, (limit - count) * 1000000, retry_after, reset_after
end

-- fw_set writes the count, to expire at the window's end.
local function fw_set(key, count, start, now, slack, window)
  redis.call('SET', key, string.format('%d:%d', count, start), 'PX', math.ceil((start + window - now) / 1000) + slack)
end

function algorithms.fixed_window(key, take, n, now, slack, limit, aligned, window)
  local need = n
  if need == 0 then need = 1 end
  local count, start = fw_at(key, now, aligned, window)
  if take and count + n <= limit then
    count = count + n
    fw_set(key, count, start, now, slack, window)
    return fw_outcome(count, start, 0, now, limit, window)
  end
  return fw_outcome(count, start, need, now, limit, window)
end

-- The largest debt: MaxLimit (10^9) requests beyond the limit, which the
-- window forgets at its end.
function charges.fixed_window(key, n, now, slack, limit, aligned, window)
  local count, start = fw_at(key, now, aligned, window)
  local fitted = count + n <= limit
  local capped
  count, capped = charge_count(count, n, limit)
  fw_set(key, count, start, now, slack, window)
  local a, r, t, z = fw_outcome(count, start, 1, now, limit, window)
  if fitted then a = 1 elseif capped then a = 2 else a = 0 end
  return a, r, t, z
end

function refunds.fixed_window(key, n, now, slack, limit, aligned, window)
  local count, start = fw_at(key, now, aligned, window)
  if count > 0 then
    count = math.max(count - n, 0)
    if count == 0 then redis.call('DEL', key) else fw_set(key, count, start, now, slack, window) end
  end
  return fw_outcome(count, start, 1, now, limit, window)
end

-- A lease step (driver.Leaser). A window needs no holds: a lease takes
-- its units into the count, and expires at the window's end if that comes
-- before its ttl, so every unit leased is spent in the window that counted
-- it. back's unused units come back to the count if its lease was taken in
-- this window (it expires after this window's start).
function leases.fixed_window(key, now, slack, limit, aligned, window, _, want, least, ttl, back_units, back_expires, unused)
  local count, start = fw_at(key, now, aligned, window)
  local changed = false
  if back_units > 0 and unused > 0 and count > 0 and back_expires > start and back_expires <= start + window then
    count = math.max(count - unused, 0)
    changed = true
  end
  local need = math.max(least, 1)
  local units, expires = 0, 0
  if want > 0 and count + need <= limit then
    -- At most half of what is left, so that other holders and Limiters
    -- without leases find some of it too.
    local take = math.min(want, math.max(least, 1, math.floor((limit - count) / 2)))
    if take > least then units, expires = take - least, math.min(now + ttl, start + window) end
    count = count + take
    need, changed = 0, true
  end
  if changed then
    if count == 0 then redis.call('DEL', key) else fw_set(key, count, start, now, slack, window) end
  end
  local a, r, t, z = fw_outcome(count, start, need, now, limit, window)
  return units, expires, a, r, t, z
end
