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
-- request, its four integers, or the message of the error it met (a key
-- of another type, a write refused with OOM or READONLY) as a plain
-- string: one request's error fails only that request. Never an error
-- reply inside the array: a client may stop reading the array at one
-- (go-redis does, at OOM, READONLY and other errors it knows), and read
-- the rest of it as the replies of the next commands.
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
      out[i] = tostring(a.err)
    else
      out[i] = tostring(a)
    end
  end
  return out
end
