package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
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

func init() {
	register(driver.AlgorithmGCRA, Algorithm{
		Label:     "GCRA",
		Doc:       "A bucket that refills continuously, one request every period / rate: no refill steps, one integer of state.",
		Remaining: "requests left",
		Summary:   "{rate} per {period} s, bursts of up to {burst}.",
		Recovers:  "refill",
		Params: []Param{
			wholeParam("rate", "Rate", "requests per period", MaxLimit, 1, RoleRate),
			secondsParam("period", "Period", 1, RolePeriod),
			wholeParam("burst", "Burst", "requests at once", MaxLimit, 10, RoleBurst),
		},
		PerPeriod: func(n int64, period time.Duration, burst int64) Policy {
			return GCRA{Rate: n, Period: period, Burst: burst}
		},
	}, GCRA{}, driver.Algorithm{Check: checkGCRA, Step: stepGCRA, Short: "gcra"})
}

// Spec validates the policy and returns its integer form: Params holds
// Burst as Capacity and the emission interval Period/Rate as Interval, in
// microseconds, rounded up so that the rate is never exceeded.
func (p GCRA) Spec() (driver.Spec, error) {
	if err := checkLimit("GCRA", "Rate", p.Rate); err != nil {
		return driver.Spec{}, err
	}
	period, err := micros("GCRA", "Period", p.Period)
	if err != nil {
		return driver.Spec{}, err
	}
	if p.Rate > period {
		return driver.Spec{}, boundError("GCRA", "Rate", BoundRate, float64(period), "%d per %v is more than one request per microsecond", p.Rate, p.Period)
	}
	if err := checkLimit("GCRA", "Burst", p.Burst); err != nil {
		return driver.Spec{}, err
	}
	return withWindow(driver.Spec{
		Algorithm: driver.AlgorithmGCRA,
		Limit:     p.Burst,
		MaxCost:   p.Burst,
		Params:    driver.Params{Capacity: p.Burst, Interval: ceilDiv(period, p.Rate)},
	}, checkGCRA)
}

// checkGCRA checks a GCRA Spec and returns its Window: the time to drain
// a full burst.
func checkGCRA(s *driver.Spec) (int64, error) {
	interval, burst := s.Params.Interval, s.Params.Capacity
	if burst != s.Limit || s.Params.Rate != 0 || s.Params.Cost != 0 {
		return 0, policyError(s.Algorithm, "", "burst %d does not match its limit %d", burst, s.Limit)
	}
	if interval <= 0 || interval > maxPeriodMicros/max(burst, 1) {
		return 0, boundError("GCRA", "Burst", BoundPeriod, MaxPeriod.Seconds(), "of %d requests %dµs apart spans more than %v", burst, interval, MaxPeriod)
	}
	return burst * interval, nil
}

// stepGCRA is the model that redisstore's gcra.lua keeps. State: v[0] the
// theoretical arrival time; at or before now, the key is as good as fresh.
// A clock gone back puts it further ahead of now: a longer wait, never
// more allowance. Beyond now + Burst·interval, it is in debt.
func stepGCRA(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	switch mode {
	case driver.Charge:
		return chargeGCRA(p, st, now, n)
	case driver.Refund:
		return refundGCRA(p, st, now, n)
	}
	interval := p.Interval
	tat := gcraAt(st, now)
	next := tat + want(n)*interval
	allowed := next-now <= p.Capacity*interval
	if allowed && mode == driver.Take {
		tat = next
		st.Live, st.V[0] = true, tat
	}
	return gcraOutcome(p, now, tat, next, allowed)
}

// gcraAt returns the theoretical arrival time at now.
func gcraAt(st *state, now int64) int64 {
	if st.Live && st.V[0] > now {
		return st.V[0]
	}
	return now
}

// gcraOutcome is the Outcome at theoretical arrival time tat of a request
// that would move it to next. Remaining is below zero by a debt (or while
// a clock gone back keeps tat further ahead).
func gcraOutcome(p driver.Params, now, tat, next int64, allowed bool) outcome {
	interval, tolerance := p.Interval, p.Capacity*p.Interval
	var retryAfter int64
	if !allowed {
		retryAfter = next - tolerance - now
	}
	// At most gcraMaxDebt below zero: a clock gone back may put tat
	// further ahead than any debt.
	remaining := max(floorDiv(tolerance-(tat-now), interval), -gcraMaxDebt(p))
	return outcome{Allowed: allowed, Remaining: remaining * unit, RetryAfter: retryAfter, ResetAfter: tat - now}
}

// gcraMaxDebt is the largest debt of a GCRA key, in requests: what it
// repays in MaxPeriod, at most MaxLimit. The theoretical arrival time
// stays within now + Window + MaxPeriod, below 2^53.
func gcraMaxDebt(p driver.Params) int64 {
	return min(maxPeriodMicros/p.Interval, MaxLimit)
}

// chargeGCRA moves the theoretical arrival time n intervals on whether or
// not they fit, up to gcraMaxDebt intervals beyond the burst; never back.
func chargeGCRA(p driver.Params, st *state, now, n int64) outcome {
	interval := p.Interval
	tat := gcraAt(st, now)
	// Compared before multiplying: n·interval may pass 2^63.
	most := now + (p.Capacity+gcraMaxDebt(p))*interval
	capped := n > floorDiv(most-tat, interval)
	next := max(tat, most)
	if !capped {
		next = tat + n*interval
	}
	allowed := next-now <= p.Capacity*interval // never when capped
	st.Live, st.V[0] = true, next
	o := gcraPeek(p, now, next)
	o.Allowed, o.Capped = allowed, capped
	return o
}

// refundGCRA moves the theoretical arrival time up to n intervals back,
// never before now, where the key is fresh and forgotten.
func refundGCRA(p driver.Params, st *state, now, n int64) outcome {
	tat := gcraAt(st, now)
	if tat > now {
		// Compared before multiplying: n·interval may pass 2^63.
		if n >= ceilDiv(tat-now, p.Interval) {
			tat = now
			*st = state{}
		} else {
			tat -= n * p.Interval
			st.V[0] = tat
		}
	}
	return gcraPeek(p, now, tat)
}

// gcraPeek is the Outcome at theoretical arrival time tat of a peek, a
// request of cost 1 that takes nothing: what a charge or a refund reports.
func gcraPeek(p driver.Params, now, tat int64) outcome {
	next := tat + p.Interval
	return gcraOutcome(p, now, tat, next, next-now <= p.Capacity*p.Interval)
}
