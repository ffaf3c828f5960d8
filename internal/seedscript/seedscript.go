// Package seedscript holds the token bucket script of the guide the
// project started from, the baseline that the benchmarks measure
// ratekeeper's scripts against.
package seedscript

// Source is the guide's token bucket, as the guide describes it: the
// caller passes capacity, rate, interval (seconds) and the time (seconds,
// as a float) in ARGV; the state is a hash read with HMGET and written
// back with HMSET on every call, allowed or not; the key never expires.
// It keeps those properties even where ratekeeper deliberately differs.
const Source = `
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'last_refill')
local tokens, last = tonumber(state[1]), tonumber(state[2])
if tokens == nil then
  tokens, last = capacity, now
end
local steps = math.floor((now - last) / interval)
if steps > 0 then
  tokens = math.min(capacity, tokens + steps * rate)
  last = last + steps * interval
end
local allowed = 0
if tokens >= 1 then
  tokens, allowed = tokens - 1, 1
end
redis.call('HMSET', KEYS[1], 'tokens', tokens, 'last_refill', last)
return {allowed, tokens}
`
