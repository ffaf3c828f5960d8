-- Prepended, after lib.lua, to the scripts that need it.

-- floor(a * b / c) for a < 2^31 and b, c < 2^50, whose product may pass
-- 2^53: long division over the bits of a keeps every term below 2^52
-- (a product below 2^53 is divided at once). Also the remainder,
-- a * b - floor(a * b / c) * c.
local function muldiv(a, b, c)
  local p = a * b -- exact below 2^53, and at least 2^53 otherwise
  if p < 9007199254740992 then
    local q = math.floor(p / c)
    return q, p - q * c
  end
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
  return a * whole + q, r
end
