package ratekeeper

import (
	"fmt"
	"time"
)

// GCRA is the generic cell rate algorithm: Rate requests per Period, with
// up to Burst at once. It behaves as a token bucket of Burst tokens that
// refills continuously, one token every Period/Rate, and keeps a single
// integer per key (the theoretical arrival time), which makes it the
// cheapest policy in Redis. Unlike TokenBucket it has no refill steps: a
// request may pass as soon as its share of the Period has elapsed.
type GCRA struct {
	// Rate is the number of requests allowed per Period. 1 to MaxLimit,
	// and at most one per microsecond.
	Rate int64
	// Period is the time over which Rate requests are allowed.
	Period time.Duration
	// Burst is how many requests may pass at once, and the largest cost.
	// 1 to MaxLimit.
	Burst int64
}

// GCRA parameters in Spec.Params.
const (
	gcraInterval = iota // microseconds between requests
	gcraBurst
)

// Spec validates the policy and returns its integer form: Params holds the
// emission interval Period/Rate in microseconds, rounded up so that the
// rate is never exceeded, and Burst.
func (p GCRA) Spec() (Spec, error) {
	if err := checkLimit("GCRA Rate", p.Rate); err != nil {
		return Spec{}, err
	}
	period, err := micros("GCRA Period", p.Period)
	if err != nil {
		return Spec{}, err
	}
	if p.Rate > period {
		return Spec{}, fmt.Errorf("%w: GCRA Rate %d per %v is more than one request per microsecond", ErrInvalidPolicy, p.Rate, p.Period)
	}
	if err := checkLimit("GCRA Burst", p.Burst); err != nil {
		return Spec{}, err
	}
	s := Spec{Algorithm: AlgorithmGCRA, Limit: p.Burst, MaxCost: p.Burst}
	s.Params[gcraInterval] = ceilDiv(period, p.Rate)
	s.Params[gcraBurst] = p.Burst
	if err := validateGCRA(&s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func validateGCRA(s *Spec) error {
	interval, burst := s.Params[gcraInterval], s.Params[gcraBurst]
	if burst != s.Limit {
		return fmt.Errorf("%w: GCRA burst %d does not match its limit %d", ErrInvalidPolicy, burst, s.Limit)
	}
	if interval <= 0 || interval > maxPeriodMicros/max(burst, 1) {
		return fmt.Errorf("%w: GCRA burst of %d requests %dµs apart spans more than %v", ErrInvalidPolicy, burst, interval, MaxPeriod)
	}
	return checkShape(s, burst*interval)
}

// stepGCRA is the model that redisstore's gcra.lua keeps. State: v[0] the
// theoretical arrival time; at or before now, the key is as good as fresh.
// A clock gone back puts it further ahead of now: a longer wait, never
// more allowance.
func (s *Spec) stepGCRA(st *State, now, n int64, take bool) outcome {
	interval, burst := s.Params[gcraInterval], s.Params[gcraBurst]
	tat := now
	if st.live && st.v[0] > now {
		tat = st.v[0]
	}
	tolerance := burst * interval
	next := tat + want(n)*interval
	allowed := next-now <= tolerance
	if allowed && take {
		tat = next
		st.live, st.v[0] = true, tat
	}
	var retryAfter int64
	if !allowed {
		retryAfter = next - tolerance - now
	}
	remaining := max(tolerance-(tat-now), 0) / interval
	return outcome{allowed, remaining * Unit, retryAfter, tat - now}
}
