package ratekeeper

import (
	"fmt"
	"math"
)

// MaxLeakyCapacity is the largest Capacity of a LeakyBucket.
const MaxLeakyCapacity = 1_000_000

// LeakyBucket is the leaky bucket as a meter (policing): each request pours
// its cost into a bucket of Capacity that drains continuously at LeakRate
// per second, and a request that would overflow it is rejected at once,
// with the exact time until it would fit. It enforces a smooth rate with
// bursts of up to Capacity; rejected requests are not queued.
type LeakyBucket struct {
	// Capacity is the most the bucket holds: the largest burst, and the
	// largest cost. 1 to MaxLeakyCapacity.
	Capacity int64
	// LeakRate is the number of requests drained per second, in
	// thousandths: 0.001 to MaxLimit.
	LeakRate float64
}

// Leaky bucket parameters in Spec.Params. The level is counted in
// billionths of a request, so that each microsecond drains a whole number
// of them (LeakRate per second is LeakRate·1000 billionths per
// microsecond) and no fraction is ever lost.
const (
	lbCapacity = iota // billionths
	lbRate            // billionths per microsecond
	lbUnit     = 1_000_000_000
)

// Spec validates the policy and returns its integer form: Params holds
// Capacity in billionths and LeakRate in billionths per microsecond.
func (p LeakyBucket) Spec() (Spec, error) {
	if p.Capacity <= 0 || p.Capacity > MaxLeakyCapacity {
		return Spec{}, fmt.Errorf("%w: LeakyBucket Capacity must be between 1 and %d, got %d", ErrInvalidPolicy, MaxLeakyCapacity, p.Capacity)
	}
	if math.IsNaN(p.LeakRate) || math.IsInf(p.LeakRate, 0) || p.LeakRate <= 0 || p.LeakRate > MaxLimit {
		return Spec{}, fmt.Errorf("%w: LeakyBucket LeakRate must be a positive finite number up to %d, got %v", ErrInvalidPolicy, MaxLimit, p.LeakRate)
	}
	rate := int64(math.Round(p.LeakRate * 1000))
	if rate == 0 {
		return Spec{}, fmt.Errorf("%w: LeakyBucket LeakRate %v is below the resolution of 0.001 per second", ErrInvalidPolicy, p.LeakRate)
	}
	s := Spec{Algorithm: AlgorithmLeakyBucket, Limit: p.Capacity, MaxCost: p.Capacity}
	s.Params[lbCapacity] = p.Capacity * lbUnit
	s.Params[lbRate] = rate
	if err := validateLeakyBucket(&s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func validateLeakyBucket(s *Spec) error {
	capacity, rate := s.Params[lbCapacity], s.Params[lbRate]
	if s.Limit > MaxLeakyCapacity || capacity != s.Limit*lbUnit {
		return fmt.Errorf("%w: leaky bucket capacity %d does not match its limit %d (at most %d)", ErrInvalidPolicy, capacity, s.Limit, MaxLeakyCapacity)
	}
	if rate <= 0 || rate > MaxLimit*1000 {
		return fmt.Errorf("%w: leaky bucket rate of %d billionths per µs is out of range", ErrInvalidPolicy, rate)
	}
	return checkShape(s, ceilDiv(capacity, rate))
}

// stepLeakyBucket is the model that redisstore's leaky_bucket.lua keeps.
// State: v[0] the level in billionths, v[1] the time it was measured.
func (s *Spec) stepLeakyBucket(st *State, now, n int64, take bool) outcome {
	capacity, rate := s.Params[lbCapacity], s.Params[lbRate]
	level, at := int64(0), now
	if st.live {
		level, at = st.v[0], max(st.v[1], now) // no drain while the clock goes back
		if elapsed := at - st.v[1]; elapsed >= ceilDiv(level, rate) {
			level = 0
		} else {
			level -= elapsed * rate
		}
	}
	need := want(n) * lbUnit
	allowed := level+need <= capacity
	if allowed && take {
		level += need
		st.live, st.v[0], st.v[1] = true, level, at
	}
	var retryAfter int64
	if !allowed {
		retryAfter = at + ceilDiv(level+need-capacity, rate) - now
	}
	resetAfter := at + ceilDiv(level, rate) - now
	return outcome{allowed, max(capacity-level, 0) / (lbUnit / Unit), retryAfter, resetAfter}
}
