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
--   algorithms.<name>(key, take, n, now, slack, capacity, rate, interval)
--
-- key      the key that holds the state
-- take     whether to consume n when the request is allowed (never for a
--          peek); without take it writes nothing
-- n        the cost in whole requests (0 peeks: answer for a cost of 1)
-- now      the time in microseconds
-- slack    milliseconds added to every expiry
-- capacity, rate, interval
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
local function clock(t)
  if t == '' then
    local tm = redis.call('TIME')
    return tm[1] * 1000000 + tm[2]
  end
  return t + 0
end

-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds tokens (in millionths) and last, the time (µs) of the last
-- refill step. Parameters: capacity (millionths), refill rate (millionths
-- per interval), refill interval (µs).
--
-- When capacity, rate and tokens are whole tokens, the state is one
-- decimal integer, which Redis keeps inside the value's object header
-- rather than as a string: the digits of tokens/10^6 + 1 (never a leading
-- zero), then last mod W in exactly k digits, then the digit k - 10, with
-- W = 10^k µs and k = 17 - (digits of capacity/10^6 + 1). That is at most
-- 18 digits, within a signed 64-bit integer. It is written when k >= 11
-- (W of 27.8 hours or more) and the bucket fills in at most W/4; any other
-- state is the string "<tokens>:<last>". The value says which format it
-- is in and its k, so either decodes whatever the parameters are now.
--
-- Decoding takes last as the time congruent to last mod W in
-- [now - 3W/4, now + W/4), which is exact while last lies there. A key
-- outlives its last refill step by at most its writer's fill time (<= W/4)
-- plus the expiry's slack, on Redis's clock: with the server's clock,
-- now - last stays below W/4 + 2 ms. With a supplied clock, a reader about
-- W/2 - 1 s ahead of the writer's clock, or W/4 behind it (6.9 hours at
-- W's least), could misplace last by a multiple of W; so could a test's
-- clock that jumps ahead that far while Redis still holds the key. The
-- window leans to the past, where time moves. Decoding is exact: each
-- operand and result is an integer below 2^53 in magnitude, save W =
-- 10^16 and 3W/4, which are exact as doubles.

-- tb_decode returns tokens and last of a stored value, or nil for
-- anything malformed, which then counts as a fresh key.
local function tb_decode(v, now)
  if not v then return nil end
  if not string.find(v, '^[1-9]%d+$') then return decode(v, 2) end
  local len, i = #v, string.byte(v, -1) - 48 -- i = k - 10
  local k = i + 10
  if i < 1 or i > 6 or len < k + 2 or len > 18 then return nil end
  local w = 1e10
  for _ = 1, i do w = w * 10 end
  local lo = string.sub(v, len - k, len - 1) + 0
  local big = 9007199254740992
  if lo >= big then return nil end -- only 16 digits can reach it
  local d = lo - now % w
  if d >= w / 4 then
    d = d - w
  elseif d < -3 * w / 4 then
    d = d + w
  end
  local last = now + d
  if last < 0 or last >= big then return nil end
  return (string.sub(v, 1, len - k - 1) - 1) * 1000000, last
end

-- tb_encode returns the value that stores tokens and last.
local function tb_encode(tokens, last, capacity, rate, interval)
  if capacity % 1000000 == 0 and rate % 1000000 == 0 and tokens % 1000000 == 0 then
    -- i = k - 10 = 7 - (digits of capacity/10^6 + 1); W = 10^k.
    local c, i, w, p = capacity / 1000000 + 1, 6, 1e16, 10
    while c >= p and i > 0 do i, w, p = i - 1, w / 10, p * 10 end
    if i > 0 and math.ceil(capacity / rate) * interval <= w / 4 then
      -- One constant format of two integers below 10^9: the digits of
      -- tokens/10^6 + 1 and the k - 8 leading digits of last mod W, then
      -- its 8 last digits and i.
      local lo = last % w
      local head = (tokens / 1000000 + 1) * (w / 1e8) + math.floor(lo / 1e8)
      return string.format('%d%09d', head, lo % 1e8 * 10 + i)
    end
  end
  return string.format('%d:%d', tokens, last)
end

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last = capacity, now
  local t, l = tb_decode(redis.call('GET', key), now)
  if t then
    tokens, last = t, l
    if now > last then
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

  local cost = need * 1000000
  local allowed = 0
  if tokens >= cost then
    allowed = 1
    if take then tokens = tokens - cost end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = last + math.ceil((cost - tokens) / rate) * interval - now
  end
  if tokens < capacity then
    reset_after = last + math.ceil((capacity - tokens) / rate) * interval - now
  end
  if allowed == 1 and take then
    -- Expire when full again: from then on a missing key decides the same.
    redis.call('SET', key, tb_encode(tokens, last, capacity, rate, interval), 'PX', math.ceil(reset_after / 1000) + slack)
  end
  return allowed, tokens, retry_after, reset_after
end

-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…6] capacity, rate, interval
-- Returns its four integers.
local _, decide = next(algorithms)
local n = ARGV[1] + 0
return {decide(KEYS[1], n > 0, n, clock(ARGV[2]), ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0)}

