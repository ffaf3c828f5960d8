-- Several policies decided at once, all or nothing: the policies of one
-- caller (ratekeeper.All), or those of several callers' requests
-- (Store.DecideAll). Either every part takes its cost, or none takes
-- anything. A peek (cost 0) takes nothing, so it never denies the others.
-- KEYS[i]  the state of the i-th part
-- ARGV[1]  now in microseconds, or "" to read the server's clock
-- ARGV[2]  milliseconds added to every expiry
-- ARGV[3]  the mode: 1 take; 2 charge and 3 refund, which charge or
--          refund every part, each on its own
-- ARGV[4…] six values per part: its algorithm's name, its cost n in whole
--          requests (0 peeks), capacity, rate, interval and cost
-- Returns the four integers of every part, in order.

local now, err = clock(ARGV[1])
if not now then return err end
local slack, mode = ARGV[2] + 0, ARGV[3] + 0

-- decide decides part i in mode m (0 check, 1 take, 2 charge, 3 refund).
local function decide(i, m)
  local at = 6 * i - 2
  return run(ARGV[at], m, KEYS[i], ARGV[at + 1] + 0, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5] + 0)
end

-- takes reports whether part i has a cost to take: a peek only decides.
local function takes(i) return ARGV[6 * i - 1] ~= '0' end

-- set writes part i's four integers into into.
local function set(into, i, a, r, t, z)
  into[4 * i - 3], into[4 * i - 2], into[4 * i - 1], into[4 * i] = a, r, t, z
end

local out, allowed = {}, true
if mode == 2 or mode == 3 then
  for i = 1, #KEYS do set(out, i, decide(i, mode)) end
  return out
end

local shared, seen = false, {}
for i = 1, #KEYS do
  if seen[KEYS[i]] then shared = true end
  seen[KEYS[i]] = true
end

if not shared then
  -- First decide without taking: a part that denies leaves the others
  -- untouched. Then take from all, if all allow.
  for i = 1, #KEYS do
    local a, r, t, z = decide(i, 0)
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
  if not allowed then return out end
  for i = 1, #KEYS do
    if takes(i) then set(out, i, decide(i, 1)) end
  end
  return out
end

-- Parts that share a key see each other's takes: they go one after the
-- other, each decided, then taken if allowed. If one denies, every key is
-- put back as it was (DUMP and RESTORE, with its expiry), and each part
-- reports its decision without its take.
local saved, order, peeks = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if not saved[key] then
    saved[key] = {redis.call('DUMP', key), redis.call('PTTL', key)}
    order[#order + 1] = key
  end
  local a, r, t, z = decide(i, 0)
  set(peeks, i, a, r, t, z)
  if a == 1 and takes(i) then
    set(out, i, decide(i, 1))
  else
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
end
if allowed then return out end
for _, key in ipairs(order) do
  local dump, ttl = saved[key][1], saved[key][2]
  if dump then
    -- PTTL: -1 without an expiry (RESTORE's 0), else at least 1 ms.
    if ttl < 0 then ttl = 0 elseif ttl == 0 then ttl = 1 end
    redis.call('RESTORE', key, ttl, dump, 'REPLACE')
  else
    redis.call('DEL', key)
  end
end
return peeks
