-- Prepended, after lib.lua, to the scripts of algorithms that take leases.
-- A key's state may end with its holds, "|<expires>:<units>" each, in
-- order of expiry: what its leases hold until they expire (ratekeeper's
-- holds.go). A hold is a table {expires, units}.

-- split_holds splits a stored state into its base and its holds, nil for
-- a state without.
local function split_holds(v)
  if not v then return nil, nil end
  local bar = string.find(v, '|', 1, true)
  if not bar then return v, nil end
  local holds = {}
  for e, u in string.gmatch(string.sub(v, bar + 1), '(%d+):(%d+)') do
    holds[#holds + 1] = {e + 0, u + 0}
  end
  return string.sub(v, 1, bar - 1), holds
end

-- holds_units returns what the holds hold in all.
local function holds_units(holds)
  local sum = 0
  if holds then
    for _, h in ipairs(holds) do sum = sum + h[2] end
  end
  return sum
end

-- holds_without returns the holds less units of the one that expires at
-- expires, and whether there was one: a lease given back.
local function holds_without(holds, expires, units)
  if not holds then return holds, false end
  local out, found = {}, false
  for _, h in ipairs(holds) do
    if not found and h[1] == expires then
      found = true
      if h[2] > units then out[#out + 1] = {h[1], h[2] - units} end
    else
      out[#out + 1] = h
    end
  end
  return out, found
end

-- holds_with returns the holds with units more held until expires, in
-- order of expiry: a new lease, merged with one of the same expiry.
local function holds_with(holds, expires, units)
  local out, added = {}, false
  for _, h in ipairs(holds or {}) do
    if not added and h[1] == expires then
      out[#out + 1] = {h[1], h[2] + units}
      added = true
    else
      if not added and h[1] > expires then
        out[#out + 1] = {expires, units}
        added = true
      end
      out[#out + 1] = h
    end
  end
  if not added then out[#out + 1] = {expires, units} end
  return out
end

-- holds_full reports whether a key may take no new lease: it holds
-- MaxHolds (64).
local function holds_full(holds)
  return holds ~= nil and #holds >= 64
end

-- holds_string is the suffix that keeps the holds in a state string.
local function holds_string(holds)
  if not holds or #holds == 0 then return '' end
  local parts = {}
  for i, h in ipairs(holds) do parts[i] = string.format('|%d:%d', h[1], h[2]) end
  return table.concat(parts)
end
