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

-- Sliding window log; the model is ratekeeper's slidinglog.go.
-- key is a sorted set of the requests admitted, one entry per request (or
-- per microsecond, when several come in one), scored by its time (µs),
-- with member "<start>+<cost>": start is the cost admitted before it,
-- modulo span, so the cost in the window is read from the oldest entry
-- and the newest. Every entry costs at least 1, so a key holds at most
-- limit entries: a call adds an entry only when none is out of the window,
-- and drops at least one otherwise.
-- Parameters: limit, window (µs).

local span = 1000000000000000 -- 10^15
local log_drop = 1000 -- the most entries one call drops

-- log_entry reads the entry of rank i: its time, start and cost; nil if
-- there is none, false if it is of another format.
local function log_entry(key, i)
  local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  if not r[1] then return nil end
  local start, cost = string.match(r[1], '^(%d+)%+(%d+)$')
  if not start then return false end
  return r[2] + 0, start + 0, cost + 0
end

-- log_up_to returns the cost of the entries from the one of first_start
-- to the one of start and cost, inclusive.
local function log_up_to(first_start, start, cost)
  return (start + cost - first_start) % span
end

function algorithms.sliding_window_log(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  -- Drop the entries out of the window, at most log_drop of them, so that
  -- no call does much more work than another: any left over lie before
  -- rank first, count for nothing, and go in the calls that follow.
  local first = redis.call('ZCOUNT', key, '-inf', now - window)
  local dropped = math.min(first, log_drop)
  if dropped > 0 then redis.call('ZREMRANGEBYRANK', key, 0, dropped - 1) end
  first = first - dropped
  local first_at, first_start = log_entry(key, first)
  local last_at, last_start, last_cost
  if first_at then last_at, last_start, last_cost = log_entry(key, -1) end
  if first_at == false or last_at == false then
    -- Written in another format: start the log over.
    redis.call('DEL', key)
    first, first_at, last_at = 0, nil, nil
  end
  local used = 0 -- the cost in the window
  if first_at then used = log_up_to(first_start, last_start, last_cost) end
  local allowed = 0
  if used + need <= limit then
    allowed = 1
    if take then
      if last_at and last_at >= now then
        -- The same microsecond, or the clock went back: one entry, so
        -- that entries stay in time order.
        redis.call('ZREM', key, string.format('%d+%d', last_start, last_cost))
        last_cost = last_cost + n
      else
        if last_at then last_start = (last_start + last_cost) % span else last_start = 0 end
        last_at, last_cost = now, n
      end
      redis.call('ZADD', key, last_at, string.format('%d+%d', last_start, last_cost))
      used = used + n
    end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    -- Wait until enough of the oldest entries have left: the first that
    -- covers the excess with those before it. It is at most the
    -- excess-th, as every entry costs at least 1: a binary search over
    -- ranks finds it in at most log2(excess) + 1 reads.
    local excess = used + need - limit
    local lo, hi, at = first, first + excess - 1, nil
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local t, s, c = log_entry(key, mid)
      if not t or log_up_to(first_start, s, c) >= excess then hi, at = mid, t else lo = mid + 1 end
    end
    if lo == first then at = first_at elseif not at then at = log_entry(key, lo) end
    retry_after = at + window - now
  end
  if last_at then
    reset_after = last_at + window - now
    if allowed == 1 and take then redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack) end
  end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
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

