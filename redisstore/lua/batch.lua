-- Several callers' requests under one algorithm, in one script call: the
-- pipeliner sends a batch of them this way, so that Redis runs one script,
-- and reads its clock once, for the whole batch.
-- KEYS[i]   the i-th request's key
-- ARGV[1…3] the first request's cost, time and slack, read by lib.lua
-- ARGV[4…]  per request, in order: its cost, its time ("" for the
--           server's), and its parameters
-- decide(key, at) runs the algorithm's function for the request whose
-- values start at ARGV[at], with n and now set to its own. Requests are
-- decided one after the other, at the server's time read once: as if
-- they had arrived in that order in the same microsecond. Returns, per
-- request, its four integers, or the error it met: one request's error
-- (a key of another type) fails only that request.
local function batch(per, decide)
  local server_now = now
  local out = {}
  for i = 1, #KEYS do
    local at = 4 + (i - 1) * per
    n = ARGV[at] + 0
    need = n
    if need == 0 then need = 1 end
    if ARGV[at + 1] == '' then now = server_now else now = ARGV[at + 1] + 0 end
    local ok, a, r, t, z = pcall(decide, KEYS[i], at)
    if ok then
      out[i] = {a, r, t, z}
    elseif type(a) == 'table' and a.err then
      out[i] = a
    else
      out[i] = redis.error_reply(tostring(a))
    end
  end
  return out
end
