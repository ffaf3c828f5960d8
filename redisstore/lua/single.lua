-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…6] capacity, rate, interval
-- Returns its four integers.
local _, decide = next(algorithms)
local n = ARGV[1] + 0
return {decide(KEYS[1], n > 0, n, clock(ARGV[2]), ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0)}
