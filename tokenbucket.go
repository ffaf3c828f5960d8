package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
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

func init() {
	driver.Register(driver.AlgorithmTokenBucket, driver.Algorithm{Check: checkTokenBucket, Step: stepTokenBucket, Lease: leaseTokenBucket, Short: "tb"})
}

// Spec validates the bucket and returns its integer form: Params holds
// Capacity and RefillRate (per Interval) in millionths, and
// RefillInterval in microseconds.
func (p TokenBucket) Spec() (driver.Spec, error) {
	if err := checkLimit("TokenBucket", "Capacity", p.Capacity); err != nil {
		return driver.Spec{}, err
	}
	rate, err := millionths("TokenBucket", "RefillRate", p.RefillRate)
	if err != nil {
		return driver.Spec{}, err
	}
	interval, err := micros("TokenBucket", "RefillInterval", p.RefillInterval)
	if err != nil {
		return driver.Spec{}, err
	}
	return withWindow(driver.Spec{
		Algorithm: driver.AlgorithmTokenBucket,
		Limit:     p.Capacity,
		MaxCost:   p.Capacity,
		Params:    driver.Params{Capacity: p.Capacity * unit, Rate: rate, Interval: interval},
	}, checkTokenBucket)
}

// checkTokenBucket checks a token bucket Spec and returns its Window: the
// time to refill from empty.
func checkTokenBucket(s *driver.Spec) (int64, error) {
	capacity, rate, interval := s.Params.Capacity, s.Params.Rate, s.Params.Interval
	if capacity != s.Limit*unit || s.Params.Cost != 0 {
		return 0, policyError(s.Algorithm, "", "capacity %d does not match its limit %d", capacity, s.Limit)
	}
	if rate <= 0 || rate > MaxLimit*unit {
		return 0, policyError(s.Algorithm, "", "refill rate of %d millionths is out of range", rate)
	}
	if interval <= 0 || interval > maxPeriodMicros {
		return 0, policyError(s.Algorithm, "", "refill interval of %dµs is out of range", interval)
	}
	steps := ceilDiv(capacity, rate)
	if steps > maxPeriodMicros/interval {
		return 0, boundError("TokenBucket", "RefillRate", driver.BoundPeriod, MaxPeriod.Seconds(), "is too slow: the bucket takes %d refills of %v to fill, longer than %v",
			steps, time.Duration(interval)*time.Microsecond, MaxPeriod)
	}
	return steps * interval, nil
}

// stepTokenBucket is the model that redisstore's token_bucket.lua keeps.
// State: v[0] tokens in millionths, below zero by a debt, v[1] the time of
// the last refill step. More holds the key's leases (holds): while they
// hold h tokens, the bucket refills to Capacity − h only, so that nothing
// refills what they hold.
func stepTokenBucket(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	switch mode {
	case driver.Charge:
		return chargeTokenBucket(p, st, now, n)
	case driver.Refund:
		return refundTokenBucket(p, st, now, n)
	}
	tokens, last, live := tokenBucketAt(p, st, now)
	need := want(n) * unit
	allowed := tokens >= need
	if allowed && mode == driver.Take {
		tokens -= need
		tokenBucketKeep(p, st, tokens, last, live)
	}
	return tokenBucketOutcome(p, now, tokens, last, need, allowed, live)
}

// tokenBucketAt returns the bucket's tokens and the time of its last
// refill step at now, and the holds still live at now. Each hold that
// expired by now, in order, kept the refill from filling its tokens
// until it expired.
func tokenBucketAt(p driver.Params, st *state, now int64) (tokens, last int64, live holds) {
	if !st.Live {
		return p.Capacity, now, nil
	}
	tokens, last = st.V[0], st.V[1]
	h := holdsOf(st)
	held := h.units() * unit
	gone, live := h.expired(now)
	for _, x := range gone {
		tokens, last = tokenBucketRefill(p, tokens, last, x.expires, p.Capacity-held)
		held -= x.units * unit
	}
	tokens, last = tokenBucketRefill(p, tokens, last, now, p.Capacity-held)
	return tokens, last, live
}

// tokenBucketRefill refills a bucket of tokens refilled last up to t, to
// at most top tokens: full there, it is as good as fresh, and its refill
// phase restarts at t.
func tokenBucketRefill(p driver.Params, tokens, last, t, top int64) (int64, int64) {
	if t > last { // no refill while the clock goes back
		steps := (t - last) / p.Interval
		if steps >= ceilDiv(top-tokens, p.Rate) {
			tokens = top
		} else {
			tokens += steps * p.Rate
			last += steps * p.Interval
		}
	}
	if tokens >= top {
		tokens, last = top, t
	}
	return tokens, last
}

// tokenBucketKeep keeps the bucket and its live holds in st; a full
// bucket without holds is a fresh one, and forgotten.
func tokenBucketKeep(p driver.Params, st *state, tokens, last int64, live holds) {
	if tokens >= p.Capacity && len(live) == 0 {
		*st = state{}
		return
	}
	st.Live, st.V[0], st.V[1] = true, tokens, last
	live.keep(st)
}

// tokenBucketOutcome is the Outcome of a bucket of tokens refilled last,
// with the live holds, for a request of need millionths.
func tokenBucketOutcome(p driver.Params, now, tokens, last, need int64, allowed bool, live holds) outcome {
	var retryAfter int64
	if !allowed {
		retryAfter = tokenBucketWhen(p, now, tokens, last, need, live) - now
	}
	return outcome{Allowed: allowed, Remaining: tokens, RetryAfter: retryAfter,
		ResetAfter: tokenBucketWhen(p, now, tokens, last, p.Capacity, live) - now}
}

// tokenBucketWhen returns the earliest time, from now, at which the
// bucket holds need tokens, if nothing else happens: once its refills
// bring them, and enough holds have expired for need to fit beside the
// others. With need the capacity, it is when the bucket is full again.
func tokenBucketWhen(p driver.Params, now, tokens, last, need int64, live holds) int64 {
	held, from := live.units()*unit, now
	for _, x := range live {
		if top := p.Capacity - held; need <= top {
			if at := max(from, tokenBucketFills(p, tokens, last, need)); at < x.expires {
				return at
			}
		}
		tokens, last = tokenBucketRefill(p, tokens, last, x.expires, p.Capacity-held)
		held -= x.units * unit
		from = x.expires
	}
	return max(from, tokenBucketFills(p, tokens, last, need))
}

// tokenBucketFills returns when the refills of a bucket of tokens
// refilled last bring it need tokens: last itself if it holds them.
func tokenBucketFills(p driver.Params, tokens, last, need int64) int64 {
	if tokens >= need {
		return last
	}
	return last + ceilDiv(need-tokens, p.Rate)*p.Interval
}

// tokenBucketMaxDebt is the largest debt of a bucket, in tokens: what it
// refills in MaxPeriod, at most MaxLimit. Its tokens stay above
// −MaxLimit·10^6, so capacity − tokens stays below 2^51, and it is full
// again within Window + MaxPeriod, so every time stays below 2^53.
func tokenBucketMaxDebt(p driver.Params) int64 {
	steps := maxPeriodMicros / p.Interval
	if steps >= ceilDiv(MaxLimit*unit, p.Rate) {
		return MaxLimit
	}
	return steps * p.Rate / unit // below 2·10^15: exact in a double
}

// chargeTokenBucket takes n tokens whether or not they are there, down to
// −tokenBucketMaxDebt.
func chargeTokenBucket(p driver.Params, st *state, now, n int64) outcome {
	tokens, last, live := tokenBucketAt(p, st, now)
	need := n * unit
	allowed := tokens >= need
	floor := min(-tokenBucketMaxDebt(p)*unit, tokens)
	capped := tokens-need < floor
	tokens = max(tokens-need, floor)
	tokenBucketKeep(p, st, tokens, last, live)
	o := tokenBucketPeek(p, now, tokens, last, live)
	o.Allowed, o.Capped = allowed, capped
	return o
}

// refundTokenBucket gives back up to n tokens, never beyond capacity less
// what the live holds hold; a full bucket without holds is a fresh one,
// and its key is forgotten.
func refundTokenBucket(p driver.Params, st *state, now, n int64) outcome {
	tokens, last, live := tokenBucketAt(p, st, now)
	if st.Live {
		tokens, last = tokenBucketBack(p, now, tokens, last, n, live)
		tokenBucketKeep(p, st, tokens, last, live)
	}
	return tokenBucketPeek(p, now, tokens, last, live)
}

// tokenBucketBack gives back up to n tokens, never beyond what the live
// holds leave: there the bucket is full, and its refill phase restarts.
func tokenBucketBack(p driver.Params, now, tokens, last, n int64, live holds) (int64, int64) {
	top := p.Capacity - live.units()*unit
	if tokens += n * unit; tokens >= top {
		return top, now
	}
	return tokens, last
}

// tokenBucketPeek is the Outcome of a peek, a request of cost 1 that takes
// nothing: what a charge or a refund reports.
func tokenBucketPeek(p driver.Params, now, tokens, last int64, live holds) outcome {
	return tokenBucketOutcome(p, now, tokens, last, unit, tokens >= unit, live)
}

// leaseTokenBucket is the lease step (driver.Algorithm.Lease): req.Back's
// unused tokens come back as a refund's do, and its hold goes; then a
// lease of up to req.Want takes what is there, at most half of it, and
// holds all of it but req.Min, which its request spends at once, until
// now + req.TTL.
func leaseTokenBucket(p driver.Params, st *state, now int64, req driver.LeaseRequest) (driver.Lease, outcome) {
	tokens, last, live := tokenBucketAt(p, st, now)
	changed := false
	if rest, ok := live.without(req.Back.Expires, req.Back.Units); ok && req.Back.Units > 0 {
		live = rest
		tokens, last = tokenBucketBack(p, now, tokens, last, req.Unused, live)
		changed = true
	}
	need := max(req.Min, 1) * unit
	allowed := tokens >= need
	var lease driver.Lease
	if allowed && req.Want > 0 {
		take := req.Min
		if !live.full() {
			// At most half of what is there, so that other holders and
			// Limiters without leases find some of it too.
			take = min(req.Want, max(req.Min, 1, tokens/unit/2))
		}
		tokens -= take * unit
		if take > req.Min {
			lease = driver.Lease{Units: take - req.Min, Expires: now + req.TTL}
			live = live.with(lease.Expires, lease.Units)
		}
		changed = true
	}
	if changed {
		tokenBucketKeep(p, st, tokens, last, live)
	}
	return lease, tokenBucketOutcome(p, now, tokens, last, need, allowed, live)
}
