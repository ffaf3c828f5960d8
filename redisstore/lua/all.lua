-- Several policies decided at once, all or nothing: the policies of one
-- caller (ratekeeper.All), or those of several callers' requests
-- (Store.DecideAll). Either every part takes its cost, or none takes
-- anything, but for charges and refunds, which always count. A peek
-- (cost 0) takes nothing, so it denies the others only while its key is
-- in debt.
-- KEYS[i]  the state of the i-th part
-- ARGV[1]  now in microseconds, or "" to read the server's clock
-- ARGV[2]  milliseconds added to every expiry
-- ARGV[3]  the mode of every part, or one digit per part: 1 take; 2
--          charge; 3 refund; 4 take, but charged when the cost does not
--          fit (driver.Request's ChargeOver)
-- ARGV[4…] six values per part: its algorithm's name, its cost n in whole
--          requests (0 peeks), capacity, rate, interval and cost
-- Returns the four integers of every part, in order.

local now, err = clock(ARGV[1])
if not now then return err end
local slack, modes = ARGV[2] + 0, ARGV[3]

-- decide decides part i in mode m (0 check, 1 take, 2 charge, 3 refund).
local function decide(i, m)
  local at = 6 * i - 2
  return run(ARGV[at], m, KEYS[i], ARGV[at + 1] + 0, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5])
end

-- takes reports whether part i has a cost to take: a peek only decides.
local function takes(i) return ARGV[6 * i - 1] ~= '0' end

-- mode is part i's mode (ARGV[3]); a peek's is 1, in every mode.
local function mode(i)
  if not takes(i) then return 1 end
  if #modes == 1 then return modes + 0 end
  return string.byte(modes, i) - 48
end

-- denies reports whether part i, which answered allowed a and remaining
-- r, denies the others: a refund never does, a peek only in debt.
local function denies(i, a, r)
  if not takes(i) then return r < 0 end
  return a ~= 1 and mode(i) ~= 3
end

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
  -- First decide without taking (charges and refunds count at once): a
  -- part that denies leaves the others untouched. Then take from all, if
  -- all allow; else charge each part of mode 4 that did not fit.
  for i = 1, #KEYS do
    local m, now_mode = mode(i), 0
    if m == 2 or m == 3 then now_mode = m end
    local a, r, t, z = decide(i, now_mode)
    set(out, i, a, r, t, z)
    if denies(i, a, r) then allowed = false end
  end
  for i = 1, #KEYS do
    local m = mode(i)
    if takes(i) and (m == 1 or m == 4) then
      if allowed then
        set(out, i, decide(i, 1))
      elseif m == 4 and out[4 * i - 3] ~= 1 then
        set(out, i, decide(i, 2))
      end
    end
  end
  return out
end

-- Parts that share a key see each other's takes: they go one after the
-- other, each decided, then taken if allowed. If one denies, every key is
-- put back as it was (DUMP and RESTORE, with its expiry), each part
-- reports its decision without its take, and the charges and refunds are
-- made again, in order, with the charges of mode 4 parts that did not
-- fit.
local saved, order, peeks = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if not saved[key] then
    saved[key] = {redis.call('DUMP', key), redis.call('PTTL', key)}
    order[#order + 1] = key
  end
  local m = mode(i)
  local a, r, t, z
  if m == 2 or m == 3 then
    a, r, t, z = decide(i, m)
    set(out, i, a, r, t, z)
  else
    a, r, t, z = decide(i, 0)
    if a == 1 and takes(i) then
      set(out, i, decide(i, 1))
    else
      set(out, i, a, r, t, z)
    end
  end
  set(peeks, i, a, r, t, z)
  if denies(i, a, r) then allowed = false end
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
for i = 1, #KEYS do
  local m = mode(i)
  if m == 2 or m == 3 then
    set(peeks, i, decide(i, m))
  elseif m == 4 and peeks[4 * i - 3] ~= 1 then
    set(peeks, i, decide(i, 2))
  end
end
return peeks
