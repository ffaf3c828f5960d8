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

-- Leaky bucket (policing); the model is ratekeeper's leakybucket.go.
-- The level is the drain time left, in ticks: a request pours unit ticks,
-- and rate ticks drain each µs. key holds "<time the bucket is empty,
-- µs, rounded up>:<the ticks it was rounded up by>".
-- Parameters: capacity (ticks), rate (ticks per µs), and cost: unit,
-- the ticks per request.

function algorithms.leaky_bucket(key, take, n, now, slack, capacity, rate, _, unit)
  local need = n
  if need == 0 then need = 1 end
  local empty, spare = now, 0
  local e, s = decode(redis.call('GET', key), 2)
  if e and e > now then
    empty, spare = e, s
    if spare > rate - 1 then spare = rate - 1 end
  end
  local wait = empty - now -- the level is wait * rate - spare ticks
  local cost = need * unit
  -- The level leaves room for cost once wait <= fits.
  local fits = math.floor((capacity - cost + spare) / rate)
  local allowed = 0
  if wait <= fits then
    allowed = 1
    if take then
      -- cost - spare > -rate: the bucket empties step µs later.
      local step = math.ceil((cost - spare) / rate)
      empty, spare = empty + step, step * rate - (cost - spare)
      wait = empty - now
      redis.call('SET', key, string.format('%d:%d', empty, spare), 'PX', math.ceil(wait / 1000) + slack)
    end
  end
  local retry_after = 0
  if allowed == 0 then retry_after = wait - fits end
  -- capacity - level, in ticks, when the level fits; then in millionths
  -- of a request, rounded down: whole requests, and six digits of long
  -- division (r < unit <= 2^49, so r * 10 stays below 2^53).
  local room = 0
  if wait <= math.floor((capacity + spare) / rate) then room = capacity - (wait * rate - spare) end
  local whole = math.floor(room / unit)
  local r, frac = room - whole * unit, 0
  for _ = 1, 6 do
    r = r * 10
    local d = math.floor(r / unit)
    frac, r = frac * 10 + d, r - d * unit
  end
  return allowed, whole * 1000000 + frac, retry_after, wait
end

-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…7] capacity, rate, interval, cost
-- Returns its four integers.
local _, decide = next(algorithms)
local n = ARGV[1] + 0
local now, err = clock(ARGV[2])
if not now then return err end
return {decide(KEYS[1], n > 0, n, now, ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0)}

