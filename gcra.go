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
	driver.Register(driver.AlgorithmGCRA, driver.Algorithm{Check: checkGCRA, Step: stepGCRA, Lease: leaseGCRA, Short: "gcra"})
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
		return driver.Spec{}, boundError("GCRA", "Rate", driver.BoundRate, float64(period), "%d per %v is more than one request per microsecond", p.Rate, p.Period)
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
		return 0, boundError("GCRA", "Burst", driver.BoundPeriod, MaxPeriod.Seconds(), "of %d requests %dµs apart spans more than %v", burst, interval, MaxPeriod)
	}
	return burst * interval, nil
}

// stepGCRA is the model that redisstore's gcra.lua keeps. State: v[0] the
// theoretical arrival time; at or before now, the key is as good as fresh.
// A clock gone back puts it further ahead of now: a longer wait, never
// more allowance. Beyond now + Burst·interval, it is in debt. More holds
// the key's leases (holds): while they hold h requests, the theoretical
// arrival time is at least now + h·interval, so that nothing refills what
// they hold.
func stepGCRA(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	switch mode {
	case driver.Charge:
		return chargeGCRA(p, st, now, n)
	case driver.Refund:
		return refundGCRA(p, st, now, n)
	}
	interval := p.Interval
	tat, live := gcraAt(p, st, now)
	next := tat + want(n)*interval
	allowed := next-now <= p.Capacity*interval
	if allowed && mode == driver.Take {
		tat = next
		gcraKeep(st, now, tat, live)
	}
	return gcraOutcome(p, now, tat, want(n), allowed, live)
}

// gcraAt returns the theoretical arrival time at now, and the holds still
// live at now. Each hold that expired by now, in order, held its units
// until it expired: the time is at least its expiry plus what was held
// until then.
func gcraAt(p driver.Params, st *state, now int64) (int64, holds) {
	tat := now
	if st.Live && st.V[0] > now {
		tat = st.V[0]
	}
	h := holdsOf(st)
	if h == nil {
		return tat, nil
	}
	held := h.units()
	gone, live := h.expired(now)
	for _, x := range gone {
		tat = max(tat, x.expires+held*p.Interval)
		held -= x.units
	}
	return max(tat, now+held*p.Interval), live
}

// gcraKeep keeps tat and the live holds in st; a key at or before now
// without holds is fresh, and forgotten.
func gcraKeep(st *state, now, tat int64, live holds) {
	if tat <= now && len(live) == 0 {
		*st = state{}
		return
	}
	st.Live, st.V[0] = true, tat
	live.keep(st)
}

// gcraReset returns when a key at theoretical arrival time tat, with the
// live holds, is full again if nothing else happens: once each hold
// expired, having held its units until then.
func gcraReset(interval, tat int64, live holds) int64 {
	held := live.units()
	for _, x := range live {
		tat = max(tat, x.expires+held*interval)
		held -= x.units
	}
	return tat
}

// gcraOutcome is the Outcome at theoretical arrival time tat, with the
// live holds, of a request of cost need. Remaining is below zero by a debt
// (or while a clock gone back keeps tat further ahead).
func gcraOutcome(p driver.Params, now, tat, need int64, allowed bool, live holds) outcome {
	interval, tolerance := p.Interval, p.Capacity*p.Interval
	var retryAfter int64
	if !allowed {
		retryAfter = gcraRetry(p, now, tat, need, live) - now
	}
	// At most gcraMaxDebt below zero: a clock gone back may put tat
	// further ahead than any debt.
	remaining := max(floorDiv(tolerance-(tat-now), interval), -gcraMaxDebt(p))
	return outcome{Allowed: allowed, Remaining: remaining * unit, RetryAfter: retryAfter, ResetAfter: gcraReset(interval, tat, live) - now}
}

// gcraRetry returns the earliest time at which a request of cost need
// could pass, on a key at theoretical arrival time tat with the live
// holds: once tat has come within the tolerance, and enough holds have
// expired for need to fit beside the others, each expired one having held
// its units until it expired.
func gcraRetry(p driver.Params, now, tat, need int64, live holds) int64 {
	interval, tolerance := p.Interval, p.Capacity*p.Interval
	held, from := live.units(), now
	for _, x := range live {
		if at := max(from, tat+need*interval-tolerance); held <= p.Capacity-need && at < x.expires {
			return at
		}
		tat = max(tat, x.expires+held*interval)
		held -= x.units
		from = x.expires
	}
	return max(from, tat+need*interval-tolerance)
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
	tat, live := gcraAt(p, st, now)
	// Compared before multiplying: n·interval may pass 2^63.
	most := now + (p.Capacity+gcraMaxDebt(p))*interval
	capped := n > floorDiv(most-tat, interval)
	next := max(tat, most)
	if !capped {
		next = tat + n*interval
	}
	allowed := next-now <= p.Capacity*interval // never when capped
	gcraKeep(st, now, next, live)
	o := gcraPeek(p, now, next, live)
	o.Allowed, o.Capped = allowed, capped
	return o
}

// refundGCRA moves the theoretical arrival time up to n intervals back,
// never before now, nor before what the live holds keep; a key at now
// without holds is fresh, and forgotten.
func refundGCRA(p driver.Params, st *state, now, n int64) outcome {
	tat, live := gcraAt(p, st, now)
	if tat > now+live.units()*p.Interval {
		tat = gcraBack(p, now, tat, n, live)
		gcraKeep(st, now, tat, live)
	}
	return gcraPeek(p, now, tat, live)
}

// gcraBack moves tat up to n intervals back, never before now + what the
// live holds hold.
func gcraBack(p driver.Params, now, tat, n int64, live holds) int64 {
	floor := now + live.units()*p.Interval
	// Compared before multiplying: n·interval may pass 2^63.
	if tat <= floor || n >= ceilDiv(tat-floor, p.Interval) {
		return floor
	}
	return tat - n*p.Interval
}

// gcraPeek is the Outcome at theoretical arrival time tat of a peek, a
// request of cost 1 that takes nothing: what a charge or a refund reports.
func gcraPeek(p driver.Params, now, tat int64, live holds) outcome {
	return gcraOutcome(p, now, tat, 1, tat+p.Interval-now <= p.Capacity*p.Interval, live)
}

// leaseGCRA is the lease step (driver.Algorithm.Lease): req.Back's unused
// units come back as a refund's do, and its hold goes; then a lease of up
// to req.Want takes what fits, and holds all of it but req.Min, which its
// request spends at once, until now + req.TTL.
func leaseGCRA(p driver.Params, st *state, now int64, req driver.LeaseRequest) (driver.Lease, outcome) {
	interval, tolerance := p.Interval, p.Capacity*p.Interval
	tat, live := gcraAt(p, st, now)
	changed := false
	if rest, ok := live.without(req.Back.Expires, req.Back.Units); ok && req.Back.Units > 0 {
		live = rest
		tat = gcraBack(p, now, tat, req.Unused, live)
		changed = true
	}
	need := max(req.Min, 1)
	next := tat + need*interval
	allowed := next-now <= tolerance
	var lease driver.Lease
	if allowed && req.Want > 0 {
		take := req.Min
		if !live.full() {
			// At most half of what fits, so that other holders and
			// Limiters without leases find some of it too.
			take = min(req.Want, max(req.Min, 1, floorDiv(now+tolerance-tat, interval)/2))
		}
		tat += take * interval
		if take > req.Min {
			lease = driver.Lease{Units: take - req.Min, Expires: now + req.TTL}
			live = live.with(lease.Expires, lease.Units)
		}
		changed = true
	}
	if changed {
		gcraKeep(st, now, tat, live)
	}
	return lease, gcraOutcome(p, now, tat, need, allowed, live)
}
