package ratekeeper

import (
	"fmt"
	"time"
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

// Token bucket parameters in Spec.Params.
const (
	tbCapacity = iota // millionths
	tbRate            // millionths per interval
	tbInterval        // microseconds
)

// Spec validates the bucket and returns its integer form: Params holds
// Capacity and RefillRate in millionths and RefillInterval in
// microseconds.
func (p TokenBucket) Spec() (Spec, error) {
	if err := checkLimit("TokenBucket Capacity", p.Capacity); err != nil {
		return Spec{}, err
	}
	rate, err := millionths("TokenBucket RefillRate", p.RefillRate)
	if err != nil {
		return Spec{}, err
	}
	interval, err := micros("TokenBucket RefillInterval", p.RefillInterval)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{
		Algorithm: AlgorithmTokenBucket,
		Limit:     p.Capacity,
		MaxCost:   p.Capacity,
	}
	s.Params[tbCapacity] = p.Capacity * Unit
	s.Params[tbRate] = rate
	s.Params[tbInterval] = interval
	if err := validateTokenBucket(&s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// validateTokenBucket checks a token bucket Spec and fills in its Window.
func validateTokenBucket(s *Spec) error {
	capacity, rate, interval := s.Params[tbCapacity], s.Params[tbRate], s.Params[tbInterval]
	if capacity != s.Limit*Unit {
		return fmt.Errorf("%w: token bucket capacity %d does not match its limit %d", ErrInvalidPolicy, capacity, s.Limit)
	}
	if rate <= 0 || rate > MaxLimit*Unit {
		return fmt.Errorf("%w: token bucket refill rate of %d millionths is out of range", ErrInvalidPolicy, rate)
	}
	if interval <= 0 || interval > maxPeriodMicros {
		return fmt.Errorf("%w: token bucket refill interval of %dµs is out of range", ErrInvalidPolicy, interval)
	}
	steps := ceilDiv(capacity, rate)
	if steps > maxPeriodMicros/interval {
		return fmt.Errorf("%w: the token bucket takes %d refills of %v to fill, longer than %v",
			ErrInvalidPolicy, steps, time.Duration(interval)*time.Microsecond, MaxPeriod)
	}
	return checkShape(s, steps*interval)
}

// stepTokenBucket is the model that redisstore's token_bucket.lua keeps.
// State: v[0] tokens in millionths, v[1] the time of the last refill step.
func (s *Spec) stepTokenBucket(st *State, now, n int64, take bool) outcome {
	capacity, rate, interval := s.Params[tbCapacity], s.Params[tbRate], s.Params[tbInterval]
	tokens, last := capacity, now
	if st.live {
		tokens, last = st.v[0], st.v[1]
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
	need := want(n) * Unit
	allowed := tokens >= need
	if allowed && take {
		tokens -= need
		st.live, st.v[0], st.v[1] = true, tokens, last
	}
	var retryAfter, resetAfter int64
	if !allowed {
		retryAfter = last + ceilDiv(need-tokens, rate)*interval - now
	}
	if tokens < capacity {
		resetAfter = last + ceilDiv(capacity-tokens, rate)*interval - now
	}
	return outcome{allowed, tokens, retryAfter, resetAfter}
}
