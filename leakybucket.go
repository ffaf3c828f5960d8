package ratekeeper

import (
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
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

// lbUnit is the scale of the leaky bucket's level: billionths of a
// request, so that each microsecond drains a whole number of them
// (LeakRate per second is LeakRate·1000 billionths per microsecond) and
// no fraction is ever lost.
const lbUnit = 1_000_000_000

func init() {
	driver.Register(driver.AlgorithmLeakyBucket, driver.Algorithm{
		Check: checkLeakyBucket, Step: stepLeakyBucket, Short: "lb"})
}

// Spec validates the policy and returns its integer form: Params holds
// Capacity in billionths and LeakRate as Rate, in billionths per
// microsecond.
func (p LeakyBucket) Spec() (driver.Spec, error) {
	if p.Capacity <= 0 || p.Capacity > MaxLeakyCapacity {
		return driver.Spec{}, policyError("LeakyBucket", "Capacity", "must be between 1 and %d, got %d", MaxLeakyCapacity, p.Capacity)
	}
	if math.IsNaN(p.LeakRate) || math.IsInf(p.LeakRate, 0) || p.LeakRate <= 0 || p.LeakRate > MaxLimit {
		return driver.Spec{}, policyError("LeakyBucket", "LeakRate", "must be a positive finite number up to %d, got %v", MaxLimit, p.LeakRate)
	}
	rate := int64(math.Round(p.LeakRate * 1000))
	if rate == 0 {
		return driver.Spec{}, policyError("LeakyBucket", "LeakRate", "%v is below the resolution of 0.001 per second", p.LeakRate)
	}
	return withWindow(driver.Spec{
		Algorithm: driver.AlgorithmLeakyBucket,
		Limit:     p.Capacity,
		MaxCost:   p.Capacity,
		Params:    driver.Params{Capacity: p.Capacity * lbUnit, Rate: rate},
	}, checkLeakyBucket)
}

// checkLeakyBucket checks a leaky bucket Spec and returns its Window: the
// time to drain a full bucket.
func checkLeakyBucket(s *driver.Spec) (int64, error) {
	capacity, rate := s.Params.Capacity, s.Params.Rate
	if s.Limit > MaxLeakyCapacity || capacity != s.Limit*lbUnit || s.Params.Interval != 0 {
		return 0, policyError(s.Algorithm, "", "capacity %d does not match its limit %d (at most %d)", capacity, s.Limit, MaxLeakyCapacity)
	}
	if rate <= 0 || rate > MaxLimit*1000 {
		return 0, policyError(s.Algorithm, "", "rate of %d billionths per µs is out of range", rate)
	}
	if window := ceilDiv(capacity, rate); window > maxPeriodMicros {
		return 0, policyError("LeakyBucket", "LeakRate", "is too slow: a full bucket takes %v to drain, longer than %v",
			time.Duration(window)*time.Microsecond, MaxPeriod)
	}
	return ceilDiv(capacity, rate), nil
}

// stepLeakyBucket is the model that redisstore's leaky_bucket.lua keeps.
// State: v[0] the level in billionths, v[1] the time it was measured.
func stepLeakyBucket(p driver.Params, st *state, now, n int64, take bool) outcome {
	capacity, rate := p.Capacity, p.Rate
	level, at := int64(0), now
	if st.Live {
		level, at = st.V[0], max(st.V[1], now) // no drain while the clock goes back
		if elapsed := at - st.V[1]; elapsed >= ceilDiv(level, rate) {
			level = 0
		} else {
			level -= elapsed * rate
		}
	}
	need := want(n) * lbUnit
	allowed := level+need <= capacity
	if allowed && take {
		level += need
		st.Live, st.V[0], st.V[1] = true, level, at
	}
	var retryAfter int64
	if !allowed {
		retryAfter = at + ceilDiv(level+need-capacity, rate) - now
	}
	resetAfter := at + ceilDiv(level, rate) - now
	return outcome{allowed, max(capacity-level, 0) / (lbUnit / unit), retryAfter, resetAfter}
}
