package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// TokenBucket allows bursts of up to Capacity requests and an average of
// RefillRate requests per RefillInterval. The bucket starts full; every
// whole RefillInterval adds RefillRate tokens, never beyond Capacity; each
// request takes its cost in tokens, or nothing if it cannot take it all.
//
// Refills are discrete, as in the classic algorithm: with RefillInterval
// one second, a token spent at 0.9 s comes back at 1 s, the next step of
// the bucket's phase. A bucket that is full again restarts its phase at
// its next request, exactly as a key seen for the first time.
type TokenBucket struct {
	// Capacity is the most tokens the bucket holds: the largest burst,
	// and the largest cost one request may have. 1 to MaxLimit.
	Capacity int64
	// RefillRate is the number of tokens added per RefillInterval. It may
	// be fractional; it is counted in millionths of a token.
	RefillRate float64
	// RefillInterval is the time between refills, in whole microseconds.
	RefillInterval time.Duration
}

func init() {
	register(driver.AlgorithmTokenBucket, Algorithm{
		Label:     "Token bucket",
		Doc:       "A bucket that holds up to Capacity tokens and gains Refill rate tokens every Refill interval: bursts of up to Capacity, then the refill rate.",
		Remaining: "tokens left",
		Summary:   "Bursts of up to {capacity}, then {refill_rate} every {refill_interval} s.",
		Recovers:  "fill",
		Params: []Param{
			wholeParam("capacity", "Capacity", "tokens", MaxLimit, 10, RoleBurst),
			decimalParam("refill_rate", "RefillRate", "tokens per interval", "per interval", 1, RoleRate),
			secondsParam("refill_interval", "RefillInterval", 1, RolePeriod),
		},
		PerPeriod: func(n int64, period time.Duration, burst int64) Policy {
			return TokenBucket{Capacity: burst, RefillRate: float64(n), RefillInterval: period}
		},
	}, TokenBucket{}, driver.Algorithm{Check: checkTokenBucket, Step: stepTokenBucket, Short: "tb"})
}

// Spec validates the bucket and returns its integer form: Params holds
// Capacity and RefillRate (per Interval) in millionths, and
// RefillInterval in microseconds.
func (p TokenBucket) Spec() (driver.Spec, error) {
	if err := checkLimit("TokenBucket", "Capacity", p.Capacity); err != nil {
		return driver.Spec{}, err
	}
	rate, err := millionths("TokenBucket", "RefillRate", p.RefillRate)
	if err != nil {
		return driver.Spec{}, err
	}
	interval, err := micros("TokenBucket", "RefillInterval", p.RefillInterval)
	if err != nil {
		return driver.Spec{}, err
	}
	return withWindow(driver.Spec{
		Algorithm: driver.AlgorithmTokenBucket,
		Limit:     p.Capacity,
		MaxCost:   p.Capacity,
		Params:    driver.Params{Capacity: p.Capacity * unit, Rate: rate, Interval: interval},
	}, checkTokenBucket)
}

// checkTokenBucket checks a token bucket Spec and returns its Window: the
// time to refill from empty.
func checkTokenBucket(s *driver.Spec) (int64, error) {
	capacity, rate, interval := s.Params.Capacity, s.Params.Rate, s.Params.Interval
	if capacity != s.Limit*unit || s.Params.Cost != 0 {
		return 0, policyError(s.Algorithm, "", "capacity %d does not match its limit %d", capacity, s.Limit)
	}
	if rate <= 0 || rate > MaxLimit*unit {
		return 0, policyError(s.Algorithm, "", "refill rate of %d millionths is out of range", rate)
	}
	if interval <= 0 || interval > maxPeriodMicros {
		return 0, policyError(s.Algorithm, "", "refill interval of %dµs is out of range", interval)
	}
	steps := ceilDiv(capacity, rate)
	if steps > maxPeriodMicros/interval {
		return 0, boundError("TokenBucket", "RefillRate", BoundPeriod, MaxPeriod.Seconds(), "is too slow: the bucket takes %d refills of %v to fill, longer than %v",
			steps, time.Duration(interval)*time.Microsecond, MaxPeriod)
	}
	return steps * interval, nil
}

// stepTokenBucket is the model that redisstore's token_bucket.lua keeps.
// State: v[0] tokens in millionths, below zero by a debt, v[1] the time of
// the last refill step.
func stepTokenBucket(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	switch mode {
	case driver.Charge:
		return chargeTokenBucket(p, st, now, n)
	case driver.Refund:
		return refundTokenBucket(p, st, now, n)
	}
	tokens, last := tokenBucketAt(p, st, now)
	need := want(n) * unit
	allowed := tokens >= need
	if allowed && mode == driver.Take {
		tokens -= need
		st.Live, st.V[0], st.V[1] = true, tokens, last
	}
	return tokenBucketOutcome(p, now, tokens, last, need, allowed)
}

// tokenBucketAt returns the bucket's tokens and the time of its last
// refill step at now.
func tokenBucketAt(p driver.Params, st *state, now int64) (tokens, last int64) {
	capacity, rate, interval := p.Capacity, p.Rate, p.Interval
	tokens, last = capacity, now
	if st.Live {
		tokens, last = st.V[0], st.V[1]
		if now > last { // no refill while the clock goes back
			steps := (now - last) / interval
			if steps >= ceilDiv(capacity-tokens, rate) {
				tokens = capacity
			} else {
				tokens += steps * rate
				last += steps * interval
			}
		}
		if tokens >= capacity {
			// Full: the same as a fresh bucket, phase and all.
			tokens, last = capacity, now
		}
	}
	return tokens, last
}

// tokenBucketOutcome is the Outcome of a bucket of tokens refilled last,
// for a request of need millionths.
func tokenBucketOutcome(p driver.Params, now, tokens, last, need int64, allowed bool) outcome {
	capacity, rate, interval := p.Capacity, p.Rate, p.Interval
	var retryAfter, resetAfter int64
	if !allowed {
		retryAfter = last + ceilDiv(need-tokens, rate)*interval - now
	}
	if tokens < capacity {
		resetAfter = last + ceilDiv(capacity-tokens, rate)*interval - now
	}
	return outcome{Allowed: allowed, Remaining: tokens, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// tokenBucketMaxDebt is the largest debt of a bucket, in tokens: what it
// refills in MaxPeriod, at most MaxLimit. Its tokens stay above
// −MaxLimit·10^6, so capacity − tokens stays below 2^51, and it is full
// again within Window + MaxPeriod, so every time stays below 2^53.
func tokenBucketMaxDebt(p driver.Params) int64 {
	steps := maxPeriodMicros / p.Interval
	if steps >= ceilDiv(MaxLimit*unit, p.Rate) {
		return MaxLimit
	}
	return steps * p.Rate / unit // below 2·10^15: exact in a double
}

// chargeTokenBucket takes n tokens whether or not they are there, down to
// −tokenBucketMaxDebt.
func chargeTokenBucket(p driver.Params, st *state, now, n int64) outcome {
	tokens, last := tokenBucketAt(p, st, now)
	need := n * unit
	allowed := tokens >= need
	floor := min(-tokenBucketMaxDebt(p)*unit, tokens)
	capped := tokens-need < floor
	tokens = max(tokens-need, floor)
	st.Live, st.V[0], st.V[1] = true, tokens, last
	o := tokenBucketPeek(p, now, tokens, last)
	o.Allowed, o.Capped = allowed, capped
	return o
}

// refundTokenBucket gives back up to n tokens, never beyond capacity; a
// full bucket is a fresh one, and its key is forgotten.
func refundTokenBucket(p driver.Params, st *state, now, n int64) outcome {
	tokens, last := tokenBucketAt(p, st, now)
	if st.Live {
		tokens = min(tokens+n*unit, p.Capacity)
		if tokens == p.Capacity {
			*st, last = state{}, now
		} else {
			st.V[0], st.V[1] = tokens, last
		}
	}
	return tokenBucketPeek(p, now, tokens, last)
}

// tokenBucketPeek is the Outcome of a peek, a request of cost 1 that takes
// nothing: what a charge or a refund reports.
func tokenBucketPeek(p driver.Params, now, tokens, last int64) outcome {
	return tokenBucketOutcome(p, now, tokens, last, unit, tokens >= unit)
}
