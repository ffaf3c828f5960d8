package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// MaxLogLimit is the largest Limit of a SlidingWindowLog, whose memory
// grows with it.
const MaxLogLimit = 10_000

// SlidingWindowLog allows Limit requests in any rolling Window, exactly:
// it records the time of every admitted request (in Redis, a sorted set)
// and counts those younger than Window. It never admits a burst across a
// window boundary, at the price of memory and time that grow with Limit;
// for large limits prefer SlidingWindowCounter or GCRA.
type SlidingWindowLog struct {
	// Limit is the number of requests allowed in any window. 1 to
	// MaxLogLimit.
	Limit int64
	// Window is the length of the rolling window, in whole microseconds.
	Window time.Duration
}

// Spec validates the policy and returns its integer form: Params holds
// Limit and Window in microseconds.
func (p SlidingWindowLog) Spec() (driver.Spec, error) {
	return windowSpec(driver.AlgorithmSlidingWindowLog, "SlidingWindowLog", MaxLogLimit, p.Limit, p.Window, checkSlidingWindowLog)
}

func init() {
	driver.Register(driver.AlgorithmSlidingWindowLog, driver.Algorithm{
		Check: checkSlidingWindowLog, Step: stepSlidingWindowLog, Short: "swl"})
}

// checkSlidingWindowLog checks a sliding window log's Spec, whose limit is
// at most MaxLogLimit, and returns its Window.
func checkSlidingWindowLog(s *driver.Spec) (int64, error) {
	if s.Limit > MaxLogLimit {
		return 0, policyError("SlidingWindowLog", "Limit", "%d is above %d", s.Limit, MaxLogLimit)
	}
	return checkWindow(s)
}

// stepSlidingWindowLog is the model that redisstore's
// sliding_window_log.lua keeps. State: the times of admitted requests,
// sorted; a request admitted at t counts until t + Window.
func stepSlidingWindowLog(p driver.Params, st *state, now, n int64, take bool) outcome {
	limit, window := p.Capacity, p.Interval
	var log []int64
	if st.Live && st.Log != nil {
		log = *st.Log
	}
	// at is now, or the newest entry's time while the clock is behind it:
	// an entry stamped in the past would leave early.
	at := now
	if len(log) > 0 {
		at = max(at, log[len(log)-1])
	}
	gone := 0
	for gone < len(log) && log[gone] <= at-window {
		gone++
	}
	if gone > 0 {
		// Entries leave as soon as a request finds them gone, as in the
		// script: a request at a clock gone back counts the same entries
		// in both.
		log = log[:copy(log, log[gone:])]
		*st.Log = log
	}
	need := want(n)
	allowed := int64(len(log))+need <= limit
	if allowed && take {
		if st.Log == nil {
			st.Log = new([]int64)
		}
		for range n {
			log = append(log, at) // the newest: the log stays sorted
		}
		*st.Log, st.Live = log, true
	}
	var retryAfter, resetAfter int64
	if !allowed {
		// Wait until enough of the oldest entries have left.
		retryAfter = log[int64(len(log))+need-limit-1] + window - now
	}
	if len(log) > 0 {
		resetAfter = log[len(log)-1] + window - now
	}
	return outcome{allowed, (limit - int64(len(log))) * unit, retryAfter, resetAfter}
}
