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
