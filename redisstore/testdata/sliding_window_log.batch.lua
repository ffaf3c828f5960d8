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

-- Sliding window log; the model is ratekeeper's slidinglog.go.
-- key is a sorted set of the requests admitted, one entry per request (or
-- per microsecond, when several come in one), scored by its time (µs),
-- with member "<start>+<cost>": start is the cost admitted before it,
-- modulo span, so the cost in the window is read from the oldest entry
-- and the newest. Every entry costs at least 1, so a key holds at most
-- limit entries: a call adds an entry only when none is out of the window,
-- and drops at least one otherwise; a charge into a window of limit
-- entries adds to the newest.
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

-- log_at drops the entries out of the window, at most log_drop of them,
-- so that no call does much more work than another: any left over lie
-- before rank first, count for nothing, and go in the calls that follow.
-- It returns first, the oldest entry in the window and the newest (nil if
-- none), and the cost in the window.
local function log_at(key, now, window)
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
  return first, first_at, first_start, last_at, last_start, last_cost, used
end

-- log_retry waits until enough of the oldest entries have left: the
-- first that covers the excess with those before it. It is at most the
-- excess-th, as every entry costs at least 1: a binary search over ranks
-- finds it in at most log2(excess) + 1 reads.
local function log_retry(key, first, first_at, first_start, excess, now, window)
  local lo, hi, at = first, first + excess - 1, nil
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local t, s, c = log_entry(key, mid)
    if not t or log_up_to(first_start, s, c) >= excess then hi, at = mid, t else lo = mid + 1 end
  end
  if lo == first then at = first_at elseif not at then at = log_entry(key, lo) end
  return at + window - now
end

-- log_add adds cost at now: to the newest entry when it is at now or
-- later (the clock went back) or merge is set, else as a new entry. It
-- returns the newest entry's time, and whether it added to it.
local function log_add(key, last_at, last_start, last_cost, cost, now, merge)
  if last_at and (last_at >= now or merge) then
    redis.call('ZREM', key, string.format('%d+%d', last_start, last_cost))
    last_cost = last_cost + cost
    if last_at < now then last_at = now end
    redis.call('ZADD', key, last_at, string.format('%d+%d', last_start, last_cost))
    return last_at, true
  end
  if last_at then last_start = (last_start + last_cost) % span else last_start = 0 end
  redis.call('ZADD', key, now, string.format('%d+%d', last_start, cost))
  return now, false
end

function algorithms.sliding_window_log(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local allowed = 0
  if used + need <= limit then
    allowed = 1
    if take then
      -- The same microsecond, or the clock went back: one entry, so that
      -- entries stay in time order.
      last_at = log_add(key, last_at, last_start, last_cost, n, now, false)
      used = used + n
    end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    retry_after = log_retry(key, first, first_at, first_start, used + need - limit, now, window)
  end
  if last_at then
    reset_after = last_at + window - now
    if allowed == 1 and take then redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack) end
  end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
end

-- The largest debt: MaxLimit (10^9) units beyond the limit, far below
-- span; they leave the window with their entries.
function charges.sliding_window_log(key, n, now, slack, limit, _, window)
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local allowed = 0
  if used + n <= limit then allowed = 1 end
  local take = math.max(math.min(n, limit + 1000000000 - used), 0)
  if take > 0 then
    -- A window of limit entries adds to its newest, which then counts
    -- from now: the log never holds more than limit entries.
    -- A window holds at most used entries: it is counted only when it
    -- may hold limit.
    local full = used >= limit and redis.call('ZCARD', key) - first >= limit
    local merged
    last_at, merged = log_add(key, last_at, last_start, last_cost, take, now, full)
    if not first_at then
      first_at, first_start = last_at, 0
    elseif merged and first_start == last_start then
      first_at = last_at -- the oldest entry is the newest, moved
    end
    used = used + take
  end
  local retry_after = 0
  if used + 1 > limit then -- for a request of cost 1
    retry_after = log_retry(key, first, first_at, first_start, used + 1 - limit, now, window)
  end
  local reset_after = 0
  if last_at then
    reset_after = last_at + window - now
    redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack)
  end
  if take < n then allowed = 2 end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
end

-- A refund takes its units back from the newest entries in the window.
function refunds.sliding_window_log(key, n, now, slack, limit, _, window)
  local first, first_at, first_start, last_at, last_start, last_cost, used = log_at(key, now, window)
  local back = math.min(n, used)
  used = used - back
  while back > 0 do
    redis.call('ZREM', key, string.format('%d+%d', last_start, last_cost))
    if last_cost > back then
      redis.call('ZADD', key, last_at, string.format('%d+%d', last_start, last_cost - back))
      back = 0
    else
      back = back - last_cost
      if used > 0 or back > 0 then last_at, last_start, last_cost = log_entry(key, -1) end
    end
  end
  local allowed, retry_after, reset_after = 1, 0, 0
  if used > 0 then
    reset_after = last_at + window - now
    if used + 1 > limit then
      allowed = 0
      retry_after = log_retry(key, first, first_at, first_start, used + 1 - limit, now, window)
    end
  end
  return allowed, (limit - used) * 1000000, retry_after, reset_after
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

