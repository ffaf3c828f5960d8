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
