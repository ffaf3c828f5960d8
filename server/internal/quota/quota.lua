-- One holder's step on one quota bucket: the model of quota.go, line for
-- line. Lua's numbers are doubles, exact for every integer below 2^53,
-- which Rule.Check and MaxDemand keep every value under; math.floor(a/b)
-- of such integers is exact too.
-- KEYS[1]  the bucket's hash: L (level, tokens × unit), A (its time), S
--          (short), and h:<holder> per holder
-- ARGV     now in ms ("" reads the server's clock), rate, unit, burst,
--          holder, demand (-1 unknown), ttl, slack
-- Returns  kind (0 deny, 1 new, 2 refresh), tokens, rate.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local rate, unit, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local me, demand, ttl, slack = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

-- a holder: 1 tokens, 2 rate, 3 sent, 4 ttl, 5 end, 6 prev tokens,
-- 7 prev rate, 8 prev end, 9 demand, 10 whether it was reported (1)
-- or estimated (0)
local raw = redis.call('HGETALL', KEYS[1])
local live, level, at, short = false, 0, 0, 0
local hs, ids = {}, {}
for i = 1, #raw, 2 do
  local f, v = raw[i], raw[i + 1]
  if f == 'L' then live, level = true, tonumber(v)
  elseif f == 'A' then at = tonumber(v)
  elseif f == 'S' then short = tonumber(v)
  else
    local h = {}
    for x in string.gmatch(v, '[^:]+') do h[#h + 1] = tonumber(x) end
    local id = string.sub(f, 3)
    hs[id] = h
    ids[#ids + 1] = id
  end
end
if not live then
  level, at, short, hs, ids = burst * unit, now, 0, {}, {}
end

local function hold(h, t)
  local tk, rt = 0, 0
  if h[5] > t then tk, rt = h[1], h[2] end
  if h[8] > t then tk, rt = math.max(tk, h[6]), math.max(rt, h[7]) end
  return tk, rt
end

if now > at then
  local rho = 0
  for _, id in ipairs(ids) do
    local _, rt = hold(hs[id], at)
    rho = rho + rt
  end
  level = level + (rate - rho) * math.min(now - at, burst * unit)
  at = now
end
local heldT, heldR = 0, 0
local kept = {}
for _, id in ipairs(ids) do
  local h = hs[id]
  if h[5] <= now and h[8] <= now and id ~= me then
    redis.call('HDEL', KEYS[1], 'h:' .. id)
    hs[id] = nil
  else
    local tk, rt = hold(h, now)
    heldT, heldR = heldT + tk, heldR + rt
    kept[#kept + 1] = id
  end
end
ids = kept
level = math.min(level, (burst - heldT) * unit)

local h = hs[me]
if not h then
  h = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
  hs[me] = h
  ids[#ids + 1] = me
end
local ownT, ownR = hold(h, now)
local othersT, othersR = heldT - ownT, heldR - ownR
local reserve = math.min(math.floor((rate + 19) / 20), rate - 1)
local assignable = rate - reserve
h[9], h[10] = math.max(math.min(demand, 8388608), 0), 1
if demand < 0 then h[10] = 0 end
-- A holder whose demand is not known yet weighs the mean of the known.
local known, unknown = 0, 0
for _, id in ipairs(ids) do
  if hs[id][10] ~= 0 then known = known + hs[id][9] else unknown = unknown + 1 end
end
local n = #ids
local weight, total = h[9], known
if unknown > 0 then
  if known == 0 then
    weight, total = 1, n
  else
    local mean = math.floor(known / (n - unknown))
    if demand < 0 then weight = mean end
    total = known + unknown * mean
  end
end
local target = math.floor(assignable / n)
if total > 0 then target = math.floor(assignable * weight / total) end
if demand < 0 then target = math.min(target, math.max(1, math.floor(assignable / 8))) end

local kind = 1
local refreshable = h[5] > now and now + slack < h[3] + h[4]
local near = 8 * math.abs(target - h[2]) <= h[2]
local out_rate = math.min(target, assignable - othersR)
local out_tokens = 0
if refreshable and near and (target >= h[2] or short <= now) then
  kind = 2
elseif out_rate < target and refreshable and out_rate <= h[2] then
  short = now + ttl + slack
  kind = 2
else
  if out_rate < target then short = now + ttl + slack end
  out_tokens = math.min(math.max(1, math.floor((burst * out_rate + 10 * rate - 1) / (10 * rate))),
    burst - othersT, math.floor(level / unit))
  if out_rate < 1 or out_tokens < 1 then
    if refreshable then
      kind = 2
    else
      kind = 0
      if h[5] <= now and h[8] <= now then
        h[5], h[8], h[6], h[7] = 0, now + ttl + slack, 0, 0
      end
    end
  end
end
if kind == 2 then
  h[3], h[4], h[5] = now, ttl, now + ttl + slack
elseif kind == 1 then
  if h[5] > now then h[6], h[7], h[8] = ownT, ownR, math.max(h[8], h[5]) end
  h[1], h[2] = out_tokens, out_rate
  h[3], h[4], h[5] = now, ttl, now + ttl + slack
  level = level - out_tokens * unit
end

local last = now
for _, id in ipairs(ids) do last = math.max(last, hs[id][5], hs[id][8]) end
redis.call('HSET', KEYS[1], 'L', string.format('%d', level), 'A', string.format('%d', at),
  'S', string.format('%d', short), 'h:' .. me, string.format('%d:%d:%d:%d:%d:%d:%d:%d:%d:%d', unpack(h)))
redis.call('PEXPIRE', KEYS[1], string.format('%d', last - now + math.floor((burst * unit + rate - 1) / rate) + 1))
if kind == 0 then return {0, 0, 0} end
return {kind, h[1], h[2]}
