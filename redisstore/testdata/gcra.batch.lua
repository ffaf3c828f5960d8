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
-- and has two more, for costs known afterwards, in the tables charges and
-- refunds under the same name, with the same arguments but take, and n >
-- 0: charges.<name> takes n whether or not it fits, and may leave the key
-- in debt; refunds.<name> gives up to n back (see driver.Mode).
--
-- It returns allowed (1 or 0), remaining in millionths, retry after (µs)
-- and reset after (µs), all integers, so Redis truncates nothing; when
-- allowed without take, they describe the state as it is. A charge
-- returns allowed 1 if n fitted, 0 if not, and 2 if not and its debt met
-- the algorithm's bound (taken up to it), with remaining below zero by the
-- debt and retry after for a cost of 1; a refund answers as a peek after
-- it. The script ends with one of single.lua, batch.lua and all.lua,
-- which read ARGV and call the functions through run.
local algorithms, charges, refunds = {}, {}, {}

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
    tat = math.max(tat - n * interval, now)
    if tat == now then redis.call('DEL', key) else gcra_set(key, tat, now, slack) end
  end
  return gcra_peek(tat, now, burst, interval)
end

-- Several callers' requests under the one algorithm this script holds, in
-- one script call: the pipeliner sends a batch of them this way, so that
-- Redis runs one script, and reads its clock once, for the whole batch.
-- KEYS[i]  the i-th request's key
-- ARGV[1]  milliseconds added to every expiry
-- ARGV[2…] seven values per request, in order: its cost n, its time (""
--          for the server's), capacity, rate, interval, cost and mode
--          (single.lua's ARGV[8])
-- Requests are decided one after the other, at the server's time read
-- once: as if they had arrived in that order in the same microsecond.
-- Returns, per request, its four integers, or the message of the error
-- it met (a key of another type, a write refused with OOM or READONLY) as
-- a plain string: one request's error fails only that request. Never an
-- error reply inside the array: a client may stop reading the array at
-- one (go-redis does, at OOM, READONLY and other errors it knows), and
-- read the rest of it as the replies of the next commands.
local name = next(algorithms)
local slack = ARGV[1] + 0
local server_now
local out = {}
for i = 1, #KEYS do
  local at = 2 + (i - 1) * 7
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
  local ok, a, r, t, z = pcall(run, name, ARGV[at + 6] + 0, KEYS[i], n, now, slack,
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

