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

-- Prepended, after lib.lua, to the scripts that need it.

-- floor(a * b / c) for a < 2^31 and b, c < 2^50, whose product may pass
-- 2^53: long division over the bits of a keeps every term below 2^52.
local function muldiv(a, b, c)
  local whole = math.floor(b / c)
  local frac = b - whole * c
  local q, r = 0, 0 -- a * frac = q * c + r, built bit by bit
  for i = 30, 0, -1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if math.floor(a / 2 ^ i) % 2 == 1 then
      r = r + frac
      if r >= c then q, r = q + 1, r - c end
    end
  end
  return a * whole + q
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

-- GCRA; the model is ratekeeper's gcra.go.
-- key holds the theoretical arrival time (µs), an integer string.
-- Parameters: burst (capacity), emission interval (µs).

function algorithms.gcra(key, take, n, now, slack, burst, _, interval)
  local need = n
  if need == 0 then need = 1 end
  local tat = decode(redis.call('GET', key), 1)
  if not tat or tat < now then tat = now end
  local tolerance = burst * interval
  local next_tat = tat + need * interval
  local allowed = 0
  if next_tat - now <= tolerance then
    allowed = 1
    if take then
      tat = next_tat
      redis.call('SET', key, string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    end
  end
  local retry_after = 0
  if allowed == 0 then retry_after = next_tat - tolerance - now end
  local room = tolerance - (tat - now)
  if room < 0 then room = 0 end
  return allowed, math.floor(room / interval) * 1000000, retry_after, tat - now
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

-- Sliding window counter; the model is ratekeeper's slidingcounter.go.
-- key holds "<start of the current window, µs>:<previous count>:<current
-- count>". Parameters: limit, window (µs).

function algorithms.sliding_window_counter(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  local start = math.floor(now / window) * window
  local prev, curr = 0, 0
  local s, p, c = decode(redis.call('GET', key), 3)
  if s then
    if s >= start then -- this window (or the clock went back)
      start, prev, curr = s, p, c
    elseif s == start - window then
      prev = c
    end
  end
  local r = now - start
  if r < 0 then r = 0 end
  -- ceil(prev * (window - r) / window): the previous window's weight.
  local weighted = prev - muldiv(prev, r, window)
  local room = limit - curr - need
  local allowed = 0
  if room >= 0 and weighted <= room then
    allowed = 1
    if take then curr = curr + n end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then
    -- The first offset at which prev's weight fits in room, if it comes in
    -- this window; else the first in the next, where curr is prev.
    local at = window
    if room >= 0 then at = window - muldiv(room, window, prev) end
    if at < window then
      retry_after = start + at - now
    else
      at = 0
      local spare = limit - need
      if curr > spare then at = window - muldiv(spare, window, curr) end
      retry_after = start + window + at - now
    end
  end
  if curr > 0 then
    reset_after = start + 2 * window - now
  elseif prev > 0 then
    reset_after = start + window - now
  end
  if allowed == 1 and take then
    redis.call('SET', key, string.format('%d:%d:%d', start, prev, curr), 'PX', math.ceil(reset_after / 1000) + slack)
  end
  local remaining = limit - curr - weighted
  if remaining < 0 then remaining = 0 end
  return allowed, remaining * 1000000, retry_after, reset_after
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

-- Token bucket; the model is ratekeeper's tokenbucket.go.
-- key holds "<tokens in millionths>:<last, the time (µs) of the last
-- refill step>". Parameters: capacity (millionths), refill rate
-- (millionths per interval), refill interval (µs).

function algorithms.token_bucket(key, take, n, now, slack, capacity, rate, interval)
  local need = n
  if need == 0 then need = 1 end
  local tokens, last = capacity, now
  local t, l = decode(redis.call('GET', key), 2)
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
    redis.call('SET', key, string.format('%d:%d', tokens, last), 'PX', math.ceil(reset_after / 1000) + slack)
  end
  return allowed, tokens, retry_after, reset_after
end

-- Several policies decided at once, all or nothing: the policies of one
-- caller (ratekeeper.All), or those of several callers' requests
-- (Store.DecideAll). Either every part takes its cost, or none takes
-- anything. A peek (cost 0) takes nothing, so it never denies the others.
-- KEYS[i]  the state of the i-th part
-- ARGV[1]  now in microseconds, or "" to read the server's clock
-- ARGV[2]  milliseconds added to every expiry
-- ARGV[3…] six values per part: its algorithm's name, its cost n in whole
--          requests (0 peeks), capacity, rate, interval and cost
-- Returns the four integers of every part, in order.

local now, err = clock(ARGV[1])
if not now then return err end
local slack = ARGV[2] + 0

-- decide decides part i; with take, it consumes the part's cost if allowed.
local function decide(i, take)
  local at = 6 * i - 3
  return algorithms[ARGV[at]](KEYS[i], take, ARGV[at + 1] + 0, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5] + 0)
end

-- takes reports whether part i has a cost to take: a peek only decides.
local function takes(i) return ARGV[6 * i - 2] ~= '0' end

-- set writes part i's four integers into into.
local function set(into, i, a, r, t, z)
  into[4 * i - 3], into[4 * i - 2], into[4 * i - 1], into[4 * i] = a, r, t, z
end

local shared, seen = false, {}
for i = 1, #KEYS do
  if seen[KEYS[i]] then shared = true end
  seen[KEYS[i]] = true
end

local out, allowed = {}, true
if not shared then
  -- First decide without taking: a part that denies leaves the others
  -- untouched. Then take from all, if all allow.
  for i = 1, #KEYS do
    local a, r, t, z = decide(i, false)
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
  if not allowed then return out end
  for i = 1, #KEYS do
    if takes(i) then set(out, i, decide(i, true)) end
  end
  return out
end

-- Parts that share a key see each other's takes: they go one after the
-- other, each decided, then taken if allowed. If one denies, every key is
-- put back as it was (DUMP and RESTORE, with its expiry), and each part
-- reports its decision without its take.
local saved, order, peeks = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if not saved[key] then
    saved[key] = {redis.call('DUMP', key), redis.call('PTTL', key)}
    order[#order + 1] = key
  end
  local a, r, t, z = decide(i, false)
  set(peeks, i, a, r, t, z)
  if a == 1 and takes(i) then
    set(out, i, decide(i, true))
  else
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
end
if allowed then return out end
for _, key in ipairs(order) do
  local dump, ttl = saved[key][1], saved[key][2]
  if dump then
    if ttl < 0 then ttl = 0 end
    redis.call('RESTORE', key, ttl, dump, 'REPLACE')
  else
    redis.call('DEL', key)
  end
end
return peeks

