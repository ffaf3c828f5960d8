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
--          it needs
--
-- It returns allowed (1 or 0), remaining in millionths, retry after (µs)
-- and reset after (µs), all integers, so Redis truncates nothing; when
-- allowed without take, they describe the state as it is. The script
-- ends with one of single.lua, batch.lua and all.lua, which read ARGV and
-- call the functions.
local algorithms = {}

-- decode reads the k (1 to 3) integers of a stored "x:y:z", each below
-- 2^53; nil for anything else, which then counts as a fresh key.
local function decode(v, k)
  if not v then return nil end
  local a, b, c
  if k == 1 then
    a = string.match(v, '^%d+$')
  elseif k == 2 then
    a, b = string.match(v, '^(%d+):(%d+)$')
  else
    a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
  end
  if not a then return nil end
  -- Digits only: "+ 0" reads them, and costs less than tonumber (a call).
  a = a + 0
  if k > 1 then b = b + 0 end
  if k > 2 then c = c + 0 end
  local big = 9007199254740992
  if a >= big or (k > 1 and b >= big) or (k > 2 and c >= big) then
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

-- Fixed window; the model is ratekeeper's fixedwindow.go.
-- key holds "<count>:<start of the window, µs>"; a key that lost its
-- expiry is repaired once its window is over. Parameters: limit, aligned
-- (1 for windows aligned to the epoch, else 0), window (µs).

function algorithms.fixed_window(key, take, n, now, slack, limit, aligned, window)
  local need = n
  if need == 0 then need = 1 end
  local count, start = 0, now
  if aligned == 1 then start = now - now % window end
  local c, s = decode(redis.call('GET', key), 2)
  if c and now < s + window then count, start = c, s end -- or the clock is behind its start
  local allowed = 0
  if count + need <= limit then
    allowed = 1
    if take then
      count = count + n
      redis.call('SET', key, string.format('%d:%d', count, start), 'PX', math.ceil((start + window - now) / 1000) + slack)
    end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then retry_after = start + window - now end
  if count > 0 then reset_after = start + window - now end
  return allowed, (limit - count) * 1000000, retry_after, reset_after
end

-- Several callers' requests under the one algorithm this script holds, in
-- one script call: the pipeliner sends a batch of them this way, so that
-- Redis runs one script, and reads its clock once, for the whole batch.
-- KEYS[i]  the i-th request's key
-- ARGV[1]  milliseconds added to every expiry
-- ARGV[2…] six values per request, in order: its cost n, its time (""
--          for the server's), capacity, rate, interval and cost
-- Requests are decided one after the other, at the server's time read
-- once: as if they had arrived in that order in the same microsecond.
-- Returns, per request, its four integers, or the message of the error
-- it met (a key of another type, a write refused with OOM or READONLY) as
-- a plain string: one request's error fails only that request. Never an
-- error reply inside the array: a client may stop reading the array at
-- one (go-redis does, at OOM, READONLY and other errors it knows), and
-- read the rest of it as the replies of the next commands.
local _, decide = next(algorithms)
local slack = ARGV[1] + 0
local server_now
local out = {}
for i = 1, #KEYS do
  local at = 2 + (i - 1) * 6
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
  local ok, a, r, t, z = pcall(decide, KEYS[i], n > 0, n, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5] + 0)
  if ok then
    out[i] = {a, r, t, z}
  elseif type(a) == 'table' and a.err then
    out[i] = tostring(a.err)
  else
    out[i] = tostring(a)
  end
end
return out

