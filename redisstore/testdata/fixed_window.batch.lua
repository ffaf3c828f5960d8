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

-- charge_count adds n to a window's count, up to limit plus MaxLimit (10^9)
-- requests of debt, never lowering a count already above that, and
-- reports whether it was capped: ratekeeper's chargeCount.
local function charge_count(count, n, limit)
  local most = math.max(limit + 1000000000, count)
  if count + n > most then return most, true end
  return count + n, false
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

