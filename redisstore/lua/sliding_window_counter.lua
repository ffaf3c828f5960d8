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
