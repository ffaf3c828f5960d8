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
