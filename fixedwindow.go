package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
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

func init() {
	driver.Register(driver.AlgorithmFixedWindow, driver.Algorithm{
		Check: checkWindow, Step: stepFixedWindow, Short: "fw"})
}

// Spec validates the policy and returns its integer form: Params holds
// Limit as Capacity and Window as Interval, in microseconds.
func (p FixedWindow) Spec() (driver.Spec, error) {
	return windowSpec(driver.AlgorithmFixedWindow, "FixedWindow", MaxLimit, p.Limit, p.Window, checkWindow)
}

// windowSpec builds the Spec of a window policy.
func windowSpec(algorithm, policy string, maxLimit, limit int64, window time.Duration,
	check func(*driver.Spec) (int64, error)) (driver.Spec, error) {
	if limit <= 0 || limit > maxLimit {
		return driver.Spec{}, policyError(policy, "Limit", "must be between 1 and %d, got %d", maxLimit, limit)
	}
	w, err := micros(policy, "Window", window)
	if err != nil {
		return driver.Spec{}, err
	}
	return withWindow(driver.Spec{
		Algorithm: algorithm,
		Limit:     limit,
		MaxCost:   limit,
		Params:    driver.Params{Capacity: limit, Interval: w},
	}, check)
}

// checkWindow checks the Spec of a window policy and returns its Window.
func checkWindow(s *driver.Spec) (int64, error) {
	if s.Params.Capacity != s.Limit || s.Params.Rate != 0 || s.Params.Cost != 0 {
		return 0, policyError(s.Algorithm, "", "limit parameter %d differs from its Limit %d", s.Params.Capacity, s.Limit)
	}
	return s.Params.Interval, nil
}

// stepFixedWindow is the model that redisstore's fixed_window.lua keeps.
// State: v[0] the count, v[1] the start of the window.
func stepFixedWindow(p driver.Params, st *state, now, n int64, take bool) outcome {
	limit, window := p.Capacity, p.Interval
	count, start := int64(0), now
	if st.Live && now < st.V[1]+window { // or the clock is behind its start
		count, start = st.V[0], st.V[1]
	}
	allowed := count+want(n) <= limit
	if allowed && take {
		count += n
		st.Live, st.V[0], st.V[1] = true, count, start
	}
	var retryAfter, resetAfter int64
	if !allowed {
		retryAfter = start + window - now // the next window admits any cost up to Limit
	}
	if count > 0 {
		resetAfter = start + window - now
	}
	return outcome{Allowed: allowed, Remaining: (limit - count) * unit, RetryAfter: retryAfter, ResetAfter: resetAfter}
}
