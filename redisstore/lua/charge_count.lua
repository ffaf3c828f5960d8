-- Prepended, after lib.lua, to the scripts that need it.

-- charge_count adds n to a window's count, up to limit plus MaxLimit (10^9)
-- requests of debt, never lowering a count already above that, and
-- reports whether it was capped: ratekeeper's chargeCount.
local function charge_count(count, n, limit)
  local most = math.max(limit + 1000000000, count)
  if count + n > most then return most, true end
  return count + n, false
end
