-- Prepended to every script. Lua numbers are doubles: every value the
-- scripts compute is an integer below 2^53, so every step is exact and the
-- results equal those of ratekeeper's Go models, bit for bit.
--
-- ARGV[1]  cost n in whole requests (0 peeks: answer for a cost of 1)
-- ARGV[2]  now in microseconds, or "" to read the server's clock
-- ARGV[3]  milliseconds added to every expiry
-- ARGV[4…] the algorithm's parameters (ratekeeper.Spec.Params)
-- Every script returns {allowed, remaining in millionths, retry after µs,
-- reset after µs}, all integers, so Redis truncates nothing.

local function idiv(a, b) -- floor(a / b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local function cdiv(a, b) -- ceil(a / b), for a >= 0
  return idiv(a + b - 1, b)
end

-- floor(a * b / c) for a < 2^31 and b, c < 2^50, whose product may pass
-- 2^53: long division over the bits of a keeps every term below 2^52.
local function muldiv(a, b, c)
  local whole = idiv(b, c)
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

-- decode reads k (1 to 3) integers stored as "x:y:z", each below 2^53;
-- nil for anything else, which then counts as a fresh key.
local patterns = {'^(%d+)$', '^(%d+):(%d+)$', '^(%d+):(%d+):(%d+)$'}
local function decode(v, k)
  if not v then return nil end
  local out = {string.match(v, patterns[k])}
  if #out ~= k then return nil end
  for i = 1, k do
    out[i] = tonumber(out[i])
    if out[i] >= 9007199254740992 then return nil end
  end
  return unpack(out, 1, k)
end

local n = tonumber(ARGV[1])
local need = n
if need == 0 then need = 1 end
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local slack = tonumber(ARGV[3])

-- expire_ms turns the time until a key's state is fresh again into a PX.
local function expire_ms(us)
  return cdiv(us, 1000) + slack
end
