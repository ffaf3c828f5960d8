-- Several callers' requests under the one algorithm this script holds, in
-- one script call: the pipeliner sends a batch of them this way, so that
-- Redis runs one script, and reads its clock once, for the whole batch.
-- KEYS[i]  the i-th request's key
-- ARGV[1]  milliseconds added to every expiry
-- ARGV[2…] seven values per request, in order: its cost n, its time (""
--          for the server's), capacity, rate, interval, cost and mode
--          (single.lua's ARGV[8])
-- Requests are decided one after the other, at the server's time read
-- once: as if they had arrived in that order in the same microsecond.
-- Returns, per request, its four integers, or the message of the error
-- it met (a key of another type, a write refused with OOM or READONLY) as
-- a plain string: one request's error fails only that request. Never an
-- error reply inside the array: a client may stop reading the array at
-- one (go-redis does, at OOM, READONLY and other errors it knows), and
-- read the rest of it as the replies of the next commands.
local name = next(algorithms)
local slack = ARGV[1] + 0
local server_now
local out = {}
for i = 1, #KEYS do
  local at = 2 + (i - 1) * 7
  local n, now = ARGV[at] + 0, ARGV[at + 1]
  if now == '' then
    if not server_now then
      local err
      server_now, err = clock('')
      if not server_now then return err end
    end
    now = server_now
  else
    now = now + 0
  end
  local ok, a, r, t, z = pcall(run, name, ARGV[at + 6] + 0, KEYS[i], n, now, slack,
    ARGV[at + 2] + 0, ARGV[at + 3] + 0, ARGV[at + 4] + 0, ARGV[at + 5])
  if ok then
    out[i] = {a, r, t, z}
  elseif type(a) == 'table' and a.err then
    out[i] = tostring(a.err)
  else
    out[i] = tostring(a)
  end
end
return out
