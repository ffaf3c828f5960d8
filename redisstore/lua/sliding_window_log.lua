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
