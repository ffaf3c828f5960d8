-- Token bucket: the model is ratekeeper's tokenbucket.go; both must return
-- identical results. Amounts are in millionths of a token, times in
-- microseconds; every value stays an integer below 2^53, so it is exact in
-- Lua's doubles.
--
-- KEYS[1]  the bucket: "<tokens>:<time of the last refill step>"
-- ARGV[1]  cost n in whole tokens (0 peeks)
-- ARGV[2]  now in microseconds, or "" to use the server's clock
-- ARGV[3]  milliseconds added to the expiry
-- ARGV[4]  capacity, ARGV[5] refill rate (millionths), ARGV[6] interval (µs)
-- Returns {allowed, tokens left, retry after µs, reset after µs}.

local function idiv(a, b) -- floor(a / b), exact for integers below 2^53
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b) return idiv(a + b - 1, b) end

local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local capacity, rate, interval = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local tokens, last = capacity, now
local state = redis.call('GET', KEYS[1])
if state then
  local sep = string.find(state, ':', 1, true)
  local t, l
  if sep then
    t, l = tonumber(string.sub(state, 1, sep - 1)), tonumber(string.sub(state, sep + 1))
  end
  if t and l then -- anything unreadable counts as a fresh bucket
    tokens, last = t, l
    if now > last then
      local steps = idiv(now - last, interval)
      if steps >= cdiv(capacity - tokens, rate) then
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
end

local want = n * 1000000
if n == 0 then want = 1000000 end -- a peek answers for a request of cost 1
local allowed = 0
if tokens >= want then
  allowed = 1
  if n > 0 then tokens = tokens - want end
end
local retry_after, reset_after = 0, 0
if allowed == 0 then
  retry_after = last + cdiv(want - tokens, rate) * interval - now
end
if tokens < capacity then
  reset_after = last + cdiv(capacity - tokens, rate) * interval - now
end
if allowed == 1 and n > 0 then
  -- Expire when full again: from then on a missing key decides the same.
  redis.call('SET', KEYS[1], string.format('%d:%d', tokens, last),
    'PX', cdiv(reset_after, 1000) + tonumber(ARGV[3]))
end
return {allowed, tokens, retry_after, reset_after}
