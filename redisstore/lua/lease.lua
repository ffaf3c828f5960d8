-- A lease step under the one algorithm this script holds (driver.Leaser).
-- KEYS[1]   its key
-- ARGV[1]   now in microseconds, or "" to read the server's clock
-- ARGV[2]   milliseconds added to every expiry
-- ARGV[3…6] capacity, rate, interval, cost (a string, as in single.lua)
-- ARGV[7…9] the new lease: want, least (the request's own cost), ttl (µs)
-- ARGV[10…12] the lease given back: its units, its expiry, and how many
--           of them were not spent
-- Returns the new lease's units, expiry and time to expiry (0, 0 and 0
-- for none), then the four integers of a take of least.
local name = next(leases)
local now, err = clock(ARGV[1])
if not now then return err end
local units, expires, a, r, t, z = leases[name](KEYS[1], now, ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0, ARGV[5] + 0, ARGV[6],
  ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0, ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0)
local lasts = 0
if units > 0 then lasts = expires - now end
return {units, expires, lasts, a, r, t, z}
