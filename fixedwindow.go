package ratekeeper

import (
	"fmt"
	"time"
)

// FixedWindow allows Limit requests per Window, the window starting at a
// key's first request (as an INCR with an expiry does). It is the simplest
// and cheapest to reason about, but a client may pass almost 2×Limit
// within a short span: the rest of one window's Limit at its end, and
// Limit at the start of the next. Denied requests do not count.
type FixedWindow struct {
	// Limit is the number of requests allowed per window. 1 to MaxLimit.
	Limit int64
	// Window is the length of a window, in whole microseconds.
	Window time.Duration
}

// Window parameters in Spec.Params, shared by the three window policies.
const (
	windowLimit  = iota
	windowLength // microseconds
)

// Spec validates the policy and returns its integer form: Params holds
// Limit and Window in microseconds.
func (p FixedWindow) Spec() (Spec, error) {
	return windowSpec(AlgorithmFixedWindow, "FixedWindow", MaxLimit, p.Limit, p.Window)
}

// windowSpec builds the Spec of a window policy.
func windowSpec(algorithm, name string, maxLimit, limit int64, window time.Duration) (Spec, error) {
	if limit <= 0 || limit > maxLimit {
		return Spec{}, fmt.Errorf("%w: %s Limit must be between 1 and %d, got %d", ErrInvalidPolicy, name, maxLimit, limit)
	}
	w, err := micros(name+" Window", window)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Algorithm: algorithm, Limit: limit, MaxCost: limit}
	s.Params[windowLimit] = limit
	s.Params[windowLength] = w
	if err := validateWindow(&s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func validateWindow(s *Spec) error {
	if s.Params[windowLimit] != s.Limit {
		return fmt.Errorf("%w: %s limit parameter %d differs from its Limit %d", ErrInvalidPolicy, s.Algorithm, s.Params[windowLimit], s.Limit)
	}
	if s.Algorithm == AlgorithmSlidingWindowLog && s.Limit > MaxLogLimit {
		return fmt.Errorf("%w: sliding window log limit %d is above %d", ErrInvalidPolicy, s.Limit, MaxLogLimit)
	}
	return checkShape(s, s.Params[windowLength])
}

// stepFixedWindow is the model that redisstore's fixed_window.lua keeps.
// State: v[0] the count, v[1] the start of the window.
func (s *Spec) stepFixedWindow(st *State, now, n int64, take bool) outcome {
	limit, window := s.Params[windowLimit], s.Params[windowLength]
	count, start := int64(0), now
	if st.live && now < st.v[1]+window { // or the clock is behind its start
		count, start = st.v[0], st.v[1]
	}
	allowed := count+want(n) <= limit
	if allowed && take {
		count += n
		st.live, st.v[0], st.v[1] = true, count, start
	}
	var retryAfter, resetAfter int64
	if !allowed {
		retryAfter = start + window - now // the next window admits any cost up to Limit
	}
	if count > 0 {
		resetAfter = start + window - now
	}
	return outcome{allowed, (limit - count) * Unit, retryAfter, resetAfter}
}
