-- Several policies decided at once, all or nothing: the policies of one
-- caller (ratekeeper.All), or those of several callers' requests
-- (Store.DecideAll). Either every part takes its cost, or none takes
-- anything. A peek (cost 0) takes nothing, so it never denies the others.
-- KEYS[i]  the state of the i-th part
-- ARGV[1]  now in microseconds, or "" to read the server's clock
-- ARGV[2]  milliseconds added to every expiry
-- ARGV[3…] six values per part: its algorithm's name, its cost n in whole
--          requests (0 peeks), capacity, rate, interval and cost
-- Returns the four integers of every part, in order.

local now, err = clock(ARGV[1])
if not now then return err end
local slack = ARGV[2] + 0

-- decide decides part i; with take, it consumes the part's cost if allowed.
local function decide(i, take)
  local at = 6 * i - 3
  return algorithms[ARGV[at]](KEYS[i], take, ARGV[at + 1] + 0, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5] + 0)
end

-- takes reports whether part i has a cost to take: a peek only decides.
local function takes(i) return ARGV[6 * i - 2] ~= '0' end

-- set writes part i's four integers into into.
local function set(into, i, a, r, t, z)
  into[4 * i - 3], into[4 * i - 2], into[4 * i - 1], into[4 * i] = a, r, t, z
end

local shared, seen = false, {}
for i = 1, #KEYS do
  if seen[KEYS[i]] then shared = true end
  seen[KEYS[i]] = true
end

local out, allowed = {}, true
if not shared then
  -- First decide without taking: a part that denies leaves the others
  -- untouched. Then take from all, if all allow.
  for i = 1, #KEYS do
    local a, r, t, z = decide(i, false)
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
  if not allowed then return out end
  for i = 1, #KEYS do
    if takes(i) then set(out, i, decide(i, true)) end
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
  local a, r, t, z = decide(i, false)
  set(peeks, i, a, r, t, z)
  if a == 1 and takes(i) then
    set(out, i, decide(i, true))
  else
    set(out, i, a, r, t, z)
    allowed = allowed and (a == 1 or not takes(i))
  end
end
if allowed then return out end
for _, key in ipairs(order) do
  local dump, ttl = saved[key][1], saved[key][2]
  if dump then
    if ttl < 0 then ttl = 0 end
    redis.call('RESTORE', key, ttl, dump, 'REPLACE')
  else
    redis.call('DEL', key)
  end
end
return peeks
