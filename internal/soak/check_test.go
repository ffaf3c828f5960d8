package soak

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// envDuration reads a positive Go duration from the environment, or
// returns def when the variable is unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration, such as 60s", name, s)
	}
	return d
}

// admission is one admitted request of a key, on the test's monotonic
// clock (the time since the run began). The server decided it at some
// instant within [sent, done]; the checks assume nothing more precise.
type admission struct {
	sent, done time.Duration
	// opener marks a FixedWindow request that began its window: it left
	// Limit−1, which only the first request of a window does.
	opener bool
}

// serverSpan is the longest that Redis's clock can measure between two
// instants that the test's clock puts d apart. Linux slews the wall
// clock that Redis reads and the monotonic clock together, so they run at
// the same rate; Redis's truncation to whole microseconds adds less than
// one.
func serverSpan(d time.Duration) time.Duration { return d + time.Microsecond }

// A spanBound is the most requests an exact limiter admits, for one key,
// at instants (of the server's clock) at most d apart; first says that
// the span begins with the key's first decision.
type spanBound func(d time.Duration, first bool) int64

// unbounded is a spanBound's answer when a span is too long to bound.
const unbounded = math.MaxInt64

// tokenBucketBound: the bucket holds at most Capacity at the first
// decision of a span, and its refill steps come at least RefillInterval
// apart (a bucket that is full again restarts its phase, later), so a span
// of d holds at most ⌈d/RefillInterval⌉ steps after that decision. A span
// from the key's first decision, which set the phase, holds at most
// ⌊d/RefillInterval⌋. The bound is Capacity + ⌊RefillRate·steps⌋, in
// millionths as the bucket counts.
func tokenBucketBound(p ratekeeper.TokenBucket) spanBound {
	rate := int64(math.Round(p.RefillRate * 1e6))
	return func(d time.Duration, first bool) int64 {
		steps := int64((d + p.RefillInterval - 1) / p.RefillInterval)
		if first {
			steps = int64(d / p.RefillInterval)
		}
		return p.Capacity + rate*steps/1e6
	}
}

// gcraBound: each admission moves the theoretical arrival time on by the
// emission interval e = ⌈Period/Rate⌉ (in µs) from at least the first
// decision's time, and may not take it more than Burst·e ahead of now:
// Burst + ⌊d/e⌋.
func gcraBound(p ratekeeper.GCRA) spanBound {
	e := time.Duration((p.Period.Microseconds()+p.Rate-1)/p.Rate) * time.Microsecond
	return func(d time.Duration, _ bool) int64 { return p.Burst + int64(d/e) }
}

// leakyBucketBound: the level is at least 0 before the first decision,
// each admission adds one and at most LeakRate·d drains meanwhile (the
// bucket rounds its rate down, never up), and the level never exceeds
// Capacity: Capacity + ⌊LeakRate·d⌋, computed exactly.
func leakyBucketBound(p ratekeeper.LeakyBucket) spanBound {
	rate := new(big.Rat).SetFloat64(p.LeakRate)
	return func(d time.Duration, _ bool) int64 {
		drained := new(big.Rat).Mul(rate, big.NewRat(int64(d), int64(time.Second)))
		return p.Capacity + new(big.Int).Quo(drained.Num(), drained.Denom()).Int64()
	}
}

// windowBound: at most limit in any span shorter than window; longer
// spans are not bounded.
func windowBound(limit int64, window time.Duration) spanBound {
	return func(d time.Duration, _ bool) int64 {
		if d < window {
			return limit
		}
		return unbounded
	}
}

// verdict is the outcome of checking one key's admissions.
type verdict struct {
	// excess is the most requests admitted beyond what an exact limiter
	// could have admitted, over any span.
	excess int64
	// early counts FixedWindow windows that certainly began less than a
	// Window after another.
	early int
}

func (v *verdict) add(w verdict) {
	v.excess = max(v.excess, w.excess)
	v.early += w.early
}

// spanExcess checks every span [a, b] with a some request's sent time and
// b some request's done time: the requests with sent >= a and done <= b
// were certainly decided within it, so an exact limiter admitted at most
// bound(serverSpan(b − a)) of them. adm must be sorted by sent time, and
// hold all of a key's admissions: the key's first decision (always an
// admission) was then made at or after the first sent time.
func spanExcess(adm []admission, bound spanBound) int64 {
	byDone := slices.Clone(adm)
	slices.SortFunc(byDone, func(x, y admission) int { return cmp.Compare(x.done, y.done) })
	var excess int64
	for i := range adm {
		if i > 0 && adm[i].sent == adm[i-1].sent {
			continue // the same spans as the previous request's
		}
		a := adm[i].sent
		left := int64(len(adm) - i) // requests sent at or after a
		first, _ := slices.BinarySearchFunc(byDone, a, func(x admission, t time.Duration) int { return cmp.Compare(x.done, t) })
		var count int64
		for _, r := range byDone[first:] {
			if r.sent < a {
				continue
			}
			count++
			b := bound(serverSpan(r.done-a), i == 0)
			if b >= left {
				break // bounds only grow with the span: no later one is exceeded
			}
			excess = max(excess, count-b)
		}
	}
	return excess
}

// fixedWindowCheck checks a FixedWindow key. Windows begin at a key's
// first request and at the first one after each window ends, so they are
// not aligned to the clock; the requests that began them (openers) place
// them, each within its opener's [sent, done]. adm must be sorted by sent.
func fixedWindowCheck(adm []admission, limit int64, window time.Duration) verdict {
	var v verdict
	var openers []admission
	for _, a := range adm {
		if a.opener {
			openers = append(openers, a)
		}
	}
	// Windows begin at least a Window apart.
	for i, a := range openers {
		for _, b := range openers[i+1:] {
			if b.sent-a.sent >= window {
				break
			}
			if serverSpan(max(a.done, b.done)-a.sent) < window {
				v.early++
			}
		}
	}
	// Each admitted request belongs to one window, and each window has one
	// opener.
	v.excess = max(0, int64(len(adm))-limit*int64(len(openers)))
	// The opener's window [s, s+Window) has s within [o.sent, o.done]: a
	// request sent after o.done and done before o.sent+Window (on the
	// server's clock) was certainly decided inside it.
	for _, o := range openers {
		inside := int64(1) // the opener itself
		first, _ := slices.BinarySearchFunc(adm, o.done, func(x admission, t time.Duration) int { return cmp.Compare(x.sent, t) })
		for _, r := range adm[first:] {
			if r.sent-o.sent >= window {
				break
			}
			if serverSpan(r.done-o.sent) < window {
				inside++
			}
		}
		v.excess = max(v.excess, inside-limit)
	}
	// Whatever the openers say, a span shorter than a Window meets at most
	// two windows.
	v.excess = max(v.excess, spanExcess(adm, windowBound(2*limit, window)))
	return v
}

// checker returns the check of one key's admissions under p, sorted by
// sent time.
func checker(p ratekeeper.Policy) func([]admission) verdict {
	span := func(b spanBound) func([]admission) verdict {
		return func(adm []admission) verdict { return verdict{excess: spanExcess(adm, b)} }
	}
	switch p := p.(type) {
	case ratekeeper.TokenBucket:
		return span(tokenBucketBound(p))
	case ratekeeper.GCRA:
		return span(gcraBound(p))
	case ratekeeper.LeakyBucket:
		return span(leakyBucketBound(p))
	case ratekeeper.FixedWindow:
		return func(adm []admission) verdict { return fixedWindowCheck(adm, p.Limit, p.Window) }
	case ratekeeper.SlidingWindowLog:
		// A request admitted at t counts until t+Window: all admitted
		// within less than a Window of the last one were in its log.
		return span(windowBound(p.Limit, p.Window))
	case ratekeeper.SlidingWindowCounter:
		// The exact rule it estimates, as for the log.
		return span(windowBound(p.Limit, p.Window))
	}
	panic(fmt.Sprintf("soak: no check for %T", p))
}

// isOpener reports whether an admitted request began a FixedWindow window.
func isOpener(p ratekeeper.Policy, res ratekeeper.Result) bool {
	_, ok := p.(ratekeeper.FixedWindow)
	return ok && res.Remaining == float64(res.Limit-1)
}

// simulate decides requests for one key with the in-process store on a
// simulated clock, about every 3 ms for 5 s (so well above any policy of
// the soak), each seen by the client within a millisecond either side of
// its decision, and returns the admissions sorted by sent time.
func simulate(t *testing.T, p ratekeeper.Policy, seed uint64) []admission {
	t.Helper()
	const origin = 1_700_000_000_123_457 // µs: not aligned to any window
	now := int64(origin)
	store := memstore.New(memstore.WithSweepInterval(0), memstore.WithClock(func() time.Time { return time.UnixMicro(now) }))
	defer store.Close()
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var adm []admission
	for now < origin+5_000_000 {
		now += 1 + int64(rng.ExpFloat64()*3000)
		res, err := lim.Allow(t.Context(), "key")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			at := time.Duration(now-origin) * time.Microsecond
			adm = append(adm, admission{
				sent:   at - time.Duration(rng.Int64N(int64(time.Millisecond))),
				done:   at + time.Duration(rng.Int64N(int64(time.Millisecond))),
				opener: isOpener(p, res),
			})
		}
	}
	slices.SortFunc(adm, func(x, y admission) int { return cmp.Compare(x.sent, y.sent) })
	return adm
}

// TestChecks holds the checks to what they claim, with no Redis: an exact
// limiter (the in-process store's models) never exceeds them, and one
// that admits a little more than its policy does.
func TestChecks(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			for seed := range uint64(5) {
				adm := simulate(t, a.policy, seed)
				v := checker(a.policy)(adm)
				if a.exact && v != (verdict{}) {
					t.Errorf("seed %d: an exact limiter fails the check: %+v", seed, v)
				}
				if seed == 0 {
					t.Logf("%d admitted in 5 s, largest excess %d", len(adm), v.excess)
				}
			}
		})
	}

	ms := time.Millisecond
	loose := []struct {
		name           string
		policy, looser ratekeeper.Policy
	}{
		{"TokenBucket/Capacity", ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: 100 * ms},
			ratekeeper.TokenBucket{Capacity: 6, RefillRate: 1, RefillInterval: 100 * ms}},
		{"TokenBucket/RefillInterval", ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: 100 * ms},
			ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: 95 * ms}},
		{"GCRA/Burst", ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 5},
			ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 6}},
		{"GCRA/Rate", ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 5},
			ratekeeper.GCRA{Rate: 11, Period: time.Second, Burst: 5}},
		{"LeakyBucket/Capacity", ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 10},
			ratekeeper.LeakyBucket{Capacity: 6, LeakRate: 10}},
		{"LeakyBucket/LeakRate", ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 10},
			ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 10.5}},
		{"FixedWindow/Limit", ratekeeper.FixedWindow{Limit: 5, Window: 500 * ms},
			ratekeeper.FixedWindow{Limit: 6, Window: 500 * ms}},
		{"FixedWindow/Window", ratekeeper.FixedWindow{Limit: 5, Window: 500 * ms},
			ratekeeper.FixedWindow{Limit: 5, Window: 450 * ms}},
		{"SlidingWindowLog/Limit", ratekeeper.SlidingWindowLog{Limit: 5, Window: 500 * ms},
			ratekeeper.SlidingWindowLog{Limit: 6, Window: 500 * ms}},
		{"SlidingWindowLog/Window", ratekeeper.SlidingWindowLog{Limit: 5, Window: 500 * ms},
			ratekeeper.SlidingWindowLog{Limit: 5, Window: 480 * ms}},
	}
	for _, c := range loose {
		t.Run("Looser/"+c.name, func(t *testing.T) {
			v := checker(c.policy)(simulate(t, c.looser, 0))
			if v == (verdict{}) {
				t.Errorf("a limiter admitting as %+v passes the check of %+v", c.looser, c.policy)
			}
			t.Logf("%+v", v)
		})
	}
}
