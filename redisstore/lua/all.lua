-- Several policies on one caller (ratekeeper.All), decided at once: the
-- request takes from every policy or from none.
-- KEYS[i]  the state of the i-th policy, all under the caller's hash tag
-- ARGV[1]  the cost n in whole requests
-- ARGV[2]  now in microseconds, or "" to read the server's clock
-- ARGV[3]  milliseconds added to every expiry
-- ARGV[4…] five values per policy: its algorithm's name, capacity, rate,
--          interval and cost
-- Returns the four integers of every policy, in order.

local n = ARGV[1] + 0
local now, err = clock(ARGV[2])
if not now then return err end
local slack = ARGV[3] + 0

local function decide(take)
  local out, allowed = {}, true
  for i = 1, #KEYS do
    local at = 5 * i - 1
    local a, r, t, z = algorithms[ARGV[at]](KEYS[i], take, n, now, slack,
      ARGV[at + 1] + 0, ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0)
    out[4 * i - 3], out[4 * i - 2], out[4 * i - 1], out[4 * i] = a, r, t, z
    allowed = allowed and a == 1
  end
  return out, allowed
end

-- First decide without taking: a policy that denies leaves the others
-- untouched. Then take from all, if all allow.
local out, allowed = decide(false)
if allowed and n > 0 then out = decide(true) end
return out
