-- Sliding window log; the model is ratekeeper's slidinglog.go.
-- key is a sorted set of admitted requests scored by their time (µs).
-- Parameters: limit, window (µs).

function algorithms.sliding_window_log(key, take, n, now, slack, limit, _, window)
  local need = n
  if need == 0 then need = 1 end
  -- at is now, or the newest entry's time while the clock is behind it:
  -- an entry stamped in the past would leave early.
  local at = now
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if newest then
    newest = newest + 0
    if newest > at then at = newest end
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', at - window)
  local count = redis.call('ZCARD', key)
  local allowed = 0
  if count + need <= limit then
    allowed = 1
    if take then
      -- Member "<µs>:<i>" is the i-th request admitted at that microsecond.
      -- Entries leave by whole timestamps, so those of one timestamp are
      -- numbered 1..k without gaps and the next is k + 1: unique, by
      -- construction.
      local base = redis.call('ZCOUNT', key, at, at)
      local args = {}
      for i = 1, n do
        args[#args + 1] = at
        args[#args + 1] = string.format('%d:%d', at, base + i)
        if #args == 1000 or i == n then
          redis.call('ZADD', key, unpack(args))
          args = {}
        end
      end
      count = count + n
    end
  end
  local retry_after, reset_after = 0, 0
  if allowed == 0 then -- until enough of the oldest entries have left
    local k = count + need - limit
    retry_after = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2] + window - now
  end
  if count > 0 then
    if allowed == 1 and take then newest = at end
    reset_after = newest + window - now
    if allowed == 1 and take then redis.call('PEXPIRE', key, math.ceil(reset_after / 1000) + slack) end
  end
  return allowed, (limit - count) * 1000000, retry_after, reset_after
end
