-- Prepended to every script. Lua numbers are doubles: every value the
-- scripts compute is an integer below 2^53, so every step is exact and the
-- results equal those of ratekeeper's Go models, bit for bit. That holds
-- for division too: for integers 0 <= a < 2^53 and b >= 1,
-- math.floor(a / b) and math.ceil(a / b) are exact, because a quotient
-- that is not an integer lies at least 1/b from one, farther than the
-- rounding of a / b (at most a/b * 2^-53) can move it.
--
-- ARGV[1]  cost n in whole requests (0 peeks: answer for a cost of 1)
-- ARGV[2]  now in microseconds, or "" to read the server's clock
-- ARGV[3]  milliseconds added to every expiry
-- ARGV[4…] the parameters (ratekeeper.Spec.Params), see below
--
-- Each algorithm is a function of its key, take, and its parameters; take
-- says whether to consume n when the request is allowed (never for a
-- peek). Without take it writes nothing. It returns allowed (1 or 0),
-- remaining in millionths, retry after (µs) and reset after (µs), all
-- integers, so Redis truncates nothing; when allowed without take, they
-- describe the state as it is. A script for one policy calls its
-- function once, with ARGV[4…] as parameters; all.lua decides for several.

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
  a, b, c = tonumber(a), tonumber(b), tonumber(c)
  local big = 9007199254740992
  if not a or a >= big or (k > 1 and (not b or b >= big)) or (k > 2 and (not c or c >= big)) then
    return nil
  end
  return a, b, c
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
