-- One request under the one algorithm this script holds.
-- KEYS[1]   its key
-- ARGV[1]   its cost n in whole requests
-- ARGV[2]   now in microseconds, or "" to read the server's clock
-- ARGV[3]   milliseconds added to every expiry
-- ARGV[4…7] capacity, rate, interval, cost (a string the algorithm reads:
--           a calendar window's bounds)
-- ARGV[8]   the mode: 1 take, 2 charge, 3 refund (0 check)
-- Returns its four integers.
local name = next(algorithms)
local now, err = clock(ARGV[2])
if not now then return err end
return {run(name, ARGV[8] + 0, KEYS[1], ARGV[1] + 0, now, ARGV[3] + 0,
  ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7])}
