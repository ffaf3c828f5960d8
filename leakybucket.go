package ratekeeper

import (
	"math"
	"math/big"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// LeakyBucket is the leaky bucket as a meter (policing): each request pours
// its cost into a bucket of Capacity that drains continuously at LeakRate
// per second, and a request that would overflow it is rejected at once,
// with the exact time until it would fit. It enforces a smooth rate with
// bursts of up to Capacity; rejected requests are not queued.
type LeakyBucket struct {
	// Capacity is the most the bucket holds: the largest burst, and the
	// largest cost. 1 to MaxLeakyCapacity.
	Capacity int64
	// LeakRate is the number of requests drained per second, any positive
	// number up to MaxLimit for which a full bucket drains within
	// MaxPeriod: down to one request per MaxPeriod for a Capacity of 1.
	// The drain time of one request, 1/LeakRate seconds, is kept to a
	// small fraction of a microsecond (at worst, for the slowest rates,
	// less than one), rounded up, so the limit is never looser than
	// LeakRate.
	LeakRate float64
}

// The leaky bucket's Params: time is counted in ticks of 1/Rate µs, and
// one request pours Cost ticks of drain time, its drain time
// 10^6/LeakRate µs rounded up to a whole tick: every value stays an
// integer and no fraction is ever lost. Capacity is Limit·Cost ticks.

func init() {
	driver.Register(driver.AlgorithmLeakyBucket, driver.Algorithm{Check: checkLeakyBucket, Step: stepLeakyBucket, Lease: leaseLeakyBucket, Short: "lb"})
}

// Bounds of the leaky bucket's parameters: a full bucket is at most
// lbMaxLevel ticks, so every level plus a cost stays below 2^50 and the
// scripts' long division below 2^53; rate is at most lbMaxRate, so that
// ticks of rate·unit stay below 2^53 too.
const (
	lbMaxLevel = 1 << 49
	lbMaxRate  = 1 << 30
)

// Spec validates the policy and returns its integer form: Params holds
// Capacity in ticks, Rate, the number of ticks per microsecond, and Cost,
// the number of ticks per request.
func (p LeakyBucket) Spec() (driver.Spec, error) {
	if p.Capacity <= 0 || p.Capacity > MaxLeakyCapacity {
		return driver.Spec{}, rangeError("LeakyBucket", "Capacity", 1, MaxLeakyCapacity, p.Capacity)
	}
	if math.IsNaN(p.LeakRate) || math.IsInf(p.LeakRate, 0) || p.LeakRate <= 0 || p.LeakRate > MaxLimit {
		bound, limit := driver.BoundMax, float64(MaxLimit)
		switch {
		case math.IsNaN(p.LeakRate):
			bound, limit = driver.NoBound, 0
		case p.LeakRate <= 0:
			bound, limit = driver.BoundMin, 0
		}
		return driver.Spec{}, boundError("LeakyBucket", "LeakRate", bound, limit, "must be a positive finite number up to %d, got %v", MaxLimit, p.LeakRate)
	}
	unit, rate, ok := leakTicks(p.Capacity, p.LeakRate)
	if !ok || ceilDiv(p.Capacity*unit, rate) > maxPeriodMicros+p.Capacity {
		return driver.Spec{}, boundError("LeakyBucket", "LeakRate", driver.BoundPeriod, MaxPeriod.Seconds(), "%v per second is too slow: a bucket of Capacity %d takes more than %v to drain (%v at most)",
			p.LeakRate, p.Capacity, MaxPeriod, float64(p.Capacity)/MaxPeriod.Seconds())
	}
	return withWindow(driver.Spec{
		Algorithm: driver.AlgorithmLeakyBucket,
		Limit:     p.Capacity,
		MaxCost:   p.Capacity,
		Params:    driver.Params{Capacity: p.Capacity * unit, Rate: rate, Cost: unit},
	}, checkLeakyBucket)
}

// leakTicks returns the ticks of a bucket of capacity draining leakRate
// requests per second: rate ticks per microsecond, and unit ticks per
// request, 10^6/leakRate µs rounded up to a whole tick, that is by less
// than 1/rate µs. rate is the largest, up to lbMaxRate, for which a full
// bucket stays within lbMaxLevel ticks; ok is false when none does.
func leakTicks(capacity int64, leakRate float64) (unit, rate int64, ok bool) {
	// A float64 is a fraction num/den, read exactly; one request drains
	// in perRequest/num µs.
	r := new(big.Rat).SetFloat64(leakRate)
	num := r.Num()
	perRequest := new(big.Int).Mul(big.NewInt(1_000_000), r.Denom())
	// capacity·⌈perRequest·rate/num⌉ <= capacity·(perRequest·rate/num + 1)
	// <= lbMaxLevel.
	most := new(big.Int).Mul(big.NewInt(lbMaxLevel-capacity), num)
	most.Quo(most, new(big.Int).Mul(big.NewInt(capacity), perRequest))
	if most.Sign() <= 0 {
		return 0, 0, false
	}
	rate = lbMaxRate
	if most.IsInt64() && most.Int64() < rate {
		rate = most.Int64()
	}
	u := new(big.Int).Mul(perRequest, big.NewInt(rate))
	u.Add(u, num).Sub(u, big.NewInt(1)).Quo(u, num)
	return u.Int64(), rate, true
}

// checkLeakyBucket checks a leaky bucket Spec and returns its Window: the
// time to drain a full bucket, at most MaxPeriod.
func checkLeakyBucket(s *driver.Spec) (int64, error) {
	capacity, rate, unit := s.Params.Capacity, s.Params.Rate, s.Params.Cost
	if s.Limit <= 0 || s.Limit > MaxLeakyCapacity || unit <= 0 || unit > lbMaxLevel/s.Limit || capacity != s.Limit*unit || s.Params.Interval != 0 {
		return 0, policyError(s.Algorithm, "", "capacity of %d ticks does not match its limit %d (at most %d) of %d ticks each",
			capacity, s.Limit, MaxLeakyCapacity, unit)
	}
	if rate <= 0 || rate > lbMaxRate {
		return 0, policyError(s.Algorithm, "", "rate of %d ticks per µs is out of range (1 to %d)", rate, lbMaxRate)
	}
	// Rounding up adds less than a microsecond per request to the drain
	// time, which may then pass MaxPeriod by as much.
	window := ceilDiv(capacity, rate)
	if window > maxPeriodMicros+s.Limit {
		return 0, policyError(s.Algorithm, "", "drains in %v, more than %v", time.Duration(window)*time.Microsecond, MaxPeriod)
	}
	return min(window, maxPeriodMicros), nil
}

// stepLeakyBucket is the model that redisstore's leaky_bucket.lua keeps.
// The level is the drain time left, in ticks: a request pours unit ticks,
// and rate ticks drain each microsecond. State: v[0] the time the bucket
// is empty, in µs, rounded up; v[1] the ticks it was rounded up by, below
// rate. Like GCRA's, the state is a time, so a key outlives a change of
// LeakRate (it is misread by less than a microsecond). A level above
// capacity holds a debt. More holds the key's leases (holds): while they
// hold h requests, the level never drains below h, so that nothing
// drains what they hold.
func stepLeakyBucket(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	switch mode {
	case driver.Charge:
		return chargeLeakyBucket(p, st, now, n)
	case driver.Refund:
		return refundLeakyBucket(p, st, now, n)
	}
	capacity, rate, unit := p.Capacity, p.Rate, p.Cost
	empty, spare, live := leakyAt(p, st, now)
	need := want(n) * unit
	// The level leaves room for need once wait <= fits.
	fits := (capacity - need + spare) / rate
	allowed := empty-now <= fits
	if allowed && mode == driver.Take {
		empty, spare = leakyPour(p, empty, spare, want(n))
		leakyKeep(st, now, empty, spare, live)
	}
	return leakyOutcome(p, now, empty, spare, need, allowed, live)
}

// leakyAt returns the time the bucket is empty, its spare ticks, and the
// holds still live at now. Each hold that expired by now, in order, kept
// the level from draining below what it held until it expired.
func leakyAt(p driver.Params, st *state, now int64) (empty, spare int64, live holds) {
	if !st.Live {
		return now, 0, nil
	}
	empty, spare = st.V[0], min(st.V[1], p.Rate-1)
	h := holdsOf(st)
	held := h.units() * p.Cost
	gone, live := h.expired(now)
	for _, x := range gone {
		empty, spare = leakyHold(p, empty, spare, x.expires, held)
		held -= x.units * p.Cost
	}
	empty, spare = leakyHold(p, empty, spare, now, held)
	if empty <= now {
		return now, 0, live
	}
	return empty, spare, live
}

// leakyHold raises the level of a bucket, empty at empty with spare
// ticks, to at least held ticks at t.
func leakyHold(p driver.Params, empty, spare, t, held int64) (int64, int64) {
	if held <= 0 {
		return empty, spare
	}
	q := ceilDiv(held, p.Rate) // held ticks drain in q µs
	if empty-t > q {
		return empty, spare // more than held: wait·rate − spare > q·rate >= held
	}
	if level := max(empty-t, 0)*p.Rate - spare; empty > t && level >= held {
		return empty, spare
	}
	return t + q, q*p.Rate - held
}

// leakyPour pours n requests into a bucket empty at empty with spare
// ticks, and returns when it is empty then.
func leakyPour(p driver.Params, empty, spare, n int64) (int64, int64) {
	// n·unit = q·rate + r: the bucket empties q or q+1 µs later.
	q, r := mulDivRem(n, p.Cost, p.Rate)
	if r > spare {
		return empty + q + 1, p.Rate - r + spare
	}
	return empty + q, spare - r
}

// leakyKeep keeps the bucket and its live holds in st; an empty bucket
// without holds is a fresh one, and forgotten.
func leakyKeep(st *state, now, empty, spare int64, live holds) {
	if empty <= now && len(live) == 0 {
		*st = state{}
		return
	}
	st.Live, st.V[0], st.V[1] = true, empty, spare
	live.keep(st)
}

// leakyOutcome is the Outcome of a bucket empty at empty with spare ticks
// and the live holds, for a request of need ticks.
func leakyOutcome(p driver.Params, now, empty, spare, need int64, allowed bool, live holds) outcome {
	capacity, rate, unit := p.Capacity, p.Rate, p.Cost
	wait := empty - now
	var retryAfter int64
	if !allowed {
		retryAfter = leakyWhen(p, now, empty, spare, need, live) - now
	}
	var remaining int64
	if wait <= (capacity+spare)/rate { // the level fits: capacity − level ticks
		remaining = mulDiv(capacity-(wait*rate-spare), driver.Unit, unit)
	} else {
		// In debt, at most MaxLimit requests (a clock gone back may put
		// the level higher than any debt).
		remaining = max((capacity/unit)*driver.Unit-leakyHeld(p, wait, spare, driver.Unit), -MaxLimit*driver.Unit)
	}
	return outcome{Allowed: allowed, Remaining: remaining, RetryAfter: retryAfter,
		ResetAfter: leakyWhen(p, now, empty, spare, 0, live) - now}
}

// leakyWhen returns the earliest time, from now, at which need ticks fit
// in the bucket, if nothing else happens: once it has drained enough, and
// enough holds have expired for need to fit beside the others, each
// expired one having kept the level up until it expired. With need 0, it
// is when the bucket is empty.
func leakyWhen(p driver.Params, now, empty, spare, need int64, live holds) int64 {
	capacity, rate := p.Capacity, p.Rate
	held, from := live.units()*p.Cost, now
	fits := func() int64 { // need fits once empty − t <= this
		if need == 0 {
			return 0
		}
		return (capacity - need + spare) / rate
	}
	for _, x := range live {
		// An empty bucket waits for every hold to expire.
		if need > 0 && held+need <= capacity {
			if at := max(from, empty-fits()); at < x.expires {
				return at
			}
		}
		empty, spare = leakyHold(p, empty, spare, x.expires, held)
		held -= x.units * p.Cost
		from = x.expires
	}
	return max(from, empty-fits())
}

// leakyHeld returns ⌈level·scale/unit⌉ for the level of a bucket that
// empties in wait µs with spare ticks, wait·rate − spare, which may pass
// 2^53: the requests it holds, rounded up, at scale 1, or in millionths.
func leakyHeld(p driver.Params, wait, spare, scale int64) int64 {
	rate, unit := p.Rate, p.Cost
	q, r := mulDivRem(rate, wait, unit) // wait·rate = q·unit + r
	q = min(q, 1<<40)                   // only for a clock gone back decades
	if r >= spare {
		d, e := mulDivRem(scale, r-spare, unit)
		if e > 0 {
			d++
		}
		return q*scale + d
	}
	d, _ := mulDivRem(scale, spare-r, unit)
	return q*scale - d
}

// leakyMaxDebt is the largest debt of a leaky bucket, in requests: what
// it drains in MaxPeriod, at least 1 (a request's drain time, rounded up,
// may pass MaxPeriod/Capacity) and at most MaxLimit. Its level then drains
// within 2·(Window + MaxPeriod), so its times stay below 2^53, and every
// step of the scripts' long divisions below 2^53.
func leakyMaxDebt(p driver.Params) int64 {
	q, _ := mulDivRem(p.Rate, maxPeriodMicros, p.Cost)
	return max(min(q, MaxLimit), 1)
}

// chargeLeakyBucket pours n requests whether or not they fit, up to
// leakyMaxDebt requests beyond capacity.
func chargeLeakyBucket(p driver.Params, st *state, now, n int64) outcome {
	capacity, rate, unit := p.Capacity, p.Rate, p.Cost
	limit := capacity / unit
	empty, spare, live := leakyAt(p, st, now)
	wait := empty - now
	allowed := n <= limit && wait <= (capacity-n*unit+spare)/rate
	pour := max(min(n, limit+leakyMaxDebt(p)-leakyHeld(p, wait, spare, 1)), 0)
	empty, spare = leakyPour(p, empty, spare, pour)
	if pour > 0 {
		leakyKeep(st, now, empty, spare, live)
	}
	o := leakyPeek(p, now, empty, spare, live)
	o.Allowed, o.Capped = allowed, pour < n
	return o
}

// refundLeakyBucket drains up to n requests from the bucket at once,
// never below what the live holds hold; an empty bucket without holds is
// a fresh one, and its key is forgotten.
func refundLeakyBucket(p driver.Params, st *state, now, n int64) outcome {
	empty, spare, live := leakyAt(p, st, now)
	if empty > now {
		empty, spare = leakyBack(p, now, empty, spare, n, live)
		leakyKeep(st, now, empty, spare, live)
		if empty <= now {
			empty, spare = now, 0
		}
	}
	return leakyPeek(p, now, empty, spare, live)
}

// leakyBack drains up to n requests at once from a bucket empty at empty
// (after now) with spare ticks, never below what the live holds hold.
func leakyBack(p driver.Params, now, empty, spare, n int64, live holds) (int64, int64) {
	rate, unit := p.Rate, p.Cost
	if n >= leakyHeld(p, empty-now, spare, 1) {
		empty, spare = now, 0
	} else {
		// n·unit = q·rate + r: the bucket empties q or q+1 µs sooner.
		q, r := mulDivRem(n, unit, rate)
		empty, spare = empty-q, spare+r
		if spare >= rate {
			empty, spare = empty-1, spare-rate
		}
	}
	return leakyHold(p, empty, spare, now, live.units()*unit)
}

// leakyPeek is the Outcome of a peek, a request of cost 1 that takes
// nothing: what a charge or a refund reports.
func leakyPeek(p driver.Params, now, empty, spare int64, live holds) outcome {
	fits := (p.Capacity - p.Cost + spare) / p.Rate
	return leakyOutcome(p, now, empty, spare, p.Cost, empty-now <= fits, live)
}

// leaseLeakyBucket is the lease step (driver.Algorithm.Lease): req.Back's
// unused requests drain at once, as a refund's do, and its hold goes;
// then a lease of up to req.Want pours what fits, at most half of it, and
// holds all of it but req.Min, which its request spends at once, until
// now + req.TTL.
func leaseLeakyBucket(p driver.Params, st *state, now int64, req driver.LeaseRequest) (driver.Lease, outcome) {
	capacity, rate, unit := p.Capacity, p.Rate, p.Cost
	empty, spare, live := leakyAt(p, st, now)
	changed := false
	if rest, ok := live.without(req.Back.Expires, req.Back.Units); ok && req.Back.Units > 0 {
		live = rest
		if empty > now {
			empty, spare = leakyBack(p, now, empty, spare, req.Unused, live)
			if empty <= now {
				empty, spare = now, 0
			}
		}
		changed = true
	}
	need := max(req.Min, 1) * unit
	allowed := empty-now <= (capacity-need+spare)/rate
	var lease driver.Lease
	if allowed && req.Want > 0 {
		take := req.Min
		if !live.full() {
			// At most half of what fits, so that other holders and
			// Limiters without leases find some of it too.
			room := (capacity - ((empty-now)*rate - spare)) / unit
			take = min(req.Want, max(req.Min, 1, room/2))
		}
		empty, spare = leakyPour(p, empty, spare, take)
		if take > req.Min {
			lease = driver.Lease{Units: take - req.Min, Expires: now + req.TTL}
			live = live.with(lease.Expires, lease.Units)
		}
		changed = true
	}
	if changed {
		leakyKeep(st, now, empty, spare, live)
	}
	return lease, leakyOutcome(p, now, empty, spare, need, allowed, live)
}
