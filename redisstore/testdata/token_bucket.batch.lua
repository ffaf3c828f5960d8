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

-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds "<tokens in millionths, below zero by a debt>:<last, the time
-- (µs) of the last refill step>". Parameters: capacity (millionths),
-- refill rate (millionths per interval), refill interval (µs).

-- tb_at returns the bucket's tokens and the time of its last refill step
-- at now, and whether the key holds a bucket.
local function tb_at(key, now, capacity, rate, interval)
  local tokens, last = capacity, now
  local t, l = decode(redis.call('GET', key), 2, true)
  if t then
    tokens, last = t, l
    if now > last then -- no refill while the clock goes back
      local steps = math.floor((now - last) / interval)
      if steps >= math.ceil((capacity - tokens) / rate) then
        tokens = capacity
      else
        tokens = tokens + steps * rate
        last = last + steps * interval
      end
    end
    if tokens >= capacity then -- full: the same as a fresh bucket, phase and all
      tokens, last = capacity, now
    end
  end
  return tokens, last, t ~= nil
end

-- tb_outcome is the answer for a request of cost millionths.
local function tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval)
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = last + math.ceil((cost - tokens) / rate) * interval - now
  end
  if tokens < capacity then
    reset_after = last + math.ceil((capacity - tokens) / rate) * interval - now
  end
  return allowed, tokens, retry_after, reset_after
end

-- tb_peek is the answer for a peek, a request of cost 1 that takes
-- nothing: what a charge or a refund reports.
local function tb_peek(tokens, last, now, capacity, rate, interval)
  local allowed = 0
  if tokens >= 1000000 then allowed = 1 end
  return tb_outcome(allowed, tokens, last, 1000000, now, capacity, rate, interval)
end

-- tb_set writes the bucket, to expire when full again: from then on a
-- missing key decides the same.
local function tb_set(key, tokens, last, reset_after, slack)
  redis.call('SET', key, string.format('%d:%d', tokens, last), 'PX', math.ceil(reset_after / 1000) + slack)
end

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last = tb_at(key, now, capacity, rate, interval)
  local cost = need * 1000000
  local allowed = 0
  if tokens >= cost then
    allowed = 1
    if take then tokens = tokens - cost end
  end
  local a, r, t, z = tb_outcome(allowed, tokens, last, cost, now, capacity, rate, interval)
  if allowed == 1 and take then tb_set(key, tokens, last, z, slack) end
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
  local tokens, last = tb_at(key, now, capacity, rate, interval)
  local cost = n * 1000000
  local allowed = 0
  if tokens >= cost then allowed = 1 end
  local floor = -tb_max_debt(rate, interval)
  if tokens < floor then floor = tokens end
  tokens = tokens - cost
  if tokens < floor then tokens, allowed = floor, 2 end
  local _, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval)
  tb_set(key, tokens, last, z, slack)
  return allowed, r, t, z
end

function refunds.token_bucket(key, n, now, slack, capacity, rate, interval)
  local tokens, last, live = tb_at(key, now, capacity, rate, interval)
  if live then
    tokens = tokens + n * 1000000
    if tokens >= capacity then
      tokens, last = capacity, now
      redis.call('DEL', key)
    end
  end
  local a, r, t, z = tb_peek(tokens, last, now, capacity, rate, interval)
  if z > 0 then tb_set(key, tokens, last, z, slack) end
  return a, r, t, z
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

