-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…7] capacity, rate, interval, cost
-- Returns its four integers.
local _, decide = next(algorithms)
local n = ARGV[1] + 0
local now, err = clock(ARGV[2])
if not now then return err end
return {decide(KEYS[1], n > 0, n, now, ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0)}
