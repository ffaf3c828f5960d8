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
