// Package leasetest runs fleets of Limiters with leases on one hot key
// against a real store, records every admission's time, and checks them
// against the policy's bound over every window: the oracle of the lease
// tests.
package leasetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Admission is when a request was admitted: between Lo and Hi, in
// microseconds of wall time (Redis's TIME on this machine). A request
// decided from a lease is admitted within its call; one decided by Redis,
// at some point of its round trip.
type Admission struct{ Lo, Hi int64 }

// A Case is a policy that takes leases, its rate, and its bound over any
// window.
type Case struct {
	Name   string
	Policy ratekeeper.Policy
	Rate   float64 // per second, for the demand
	// Bound returns the largest excess of the admissions over the
	// policy's bound in any window, and a description of the worst.
	Bound func(adm []Admission) (worst string, over int64)
	// Gaps: at twice its rate the policy itself denies every request
	// for longer than a TTL (a fixed window spent before it ends).
	Gaps bool
}

// SpanBound checks every window [Lo_i, Hi_j] of the admissions against
// most(Hi_j − Lo_i), the most a policy admits in such a span, counting
// only the admissions surely inside it.
func SpanBound(most func(d int64) int64) func([]Admission) (string, int64) {
	return func(adm []Admission) (string, int64) {
		byLo := slices.Clone(adm)
		slices.SortFunc(byLo, func(x, y Admission) int { return int(x.Lo - y.Lo) })
		byHi := slices.Clone(adm)
		slices.SortFunc(byHi, func(x, y Admission) int { return int(x.Hi - y.Hi) })
		var worst string
		var over int64
		for _, a := range byLo {
			var n int64
			for _, x := range byHi {
				if x.Hi < a.Lo || x.Lo < a.Lo {
					continue
				}
				n++
				if excess := n - most(x.Hi-a.Lo); excess > over {
					over, worst = excess, fmt.Sprintf("%d admitted within [%d, %d]µs", n, a.Lo, x.Hi)
				}
			}
		}
		return worst, over
	}
}

// WindowBound checks every window aligned to w µs against a limit of
// limit, counting only the admissions surely inside it.
func WindowBound(limit, w int64) func([]Admission) (string, int64) {
	return func(adm []Admission) (string, int64) {
		counts := map[int64]int64{}
		for _, a := range adm {
			if a.Lo/w == a.Hi/w {
				counts[a.Lo/w]++
			}
		}
		var worst string
		var over int64
		for win, n := range counts {
			if n-limit > over {
				over, worst = n-limit, fmt.Sprintf("%d admitted in the window at %dµs", n, win*w)
			}
		}
		return worst, over
	}
}

// Cases are a policy of each algorithm that takes leases, at 2,000 a
// second.
var Cases = []Case{
	// A burst of 50, then one every 500µs.
	{"gcra2000ps_b50", ratekeeper.GCRA{Rate: 2000, Period: time.Second, Burst: 50}, 2000,
		SpanBound(func(d int64) int64 { return 50 + d/500 }), false},
	// 50, then 20 at each refill: at most d/10ms + 1 refills in d.
	{"tb50_20per10ms", ratekeeper.TokenBucket{Capacity: 50, RefillRate: 20, RefillInterval: 10 * time.Millisecond}, 2000,
		SpanBound(func(d int64) int64 { return 50 + 20*(d/10_000+1) }), false},
	// 50, draining one every 500µs.
	{"lb50_2000ps", ratekeeper.LeakyBucket{Capacity: 50, LeakRate: 2000}, 2000,
		SpanBound(func(d int64) int64 { return 50 + d/500 }), false},
	{"fwa200per100ms", ratekeeper.FixedWindow{Limit: 200, Window: 100 * time.Millisecond, Aligned: true}, 2000,
		WindowBound(200, 100_000), true},
}

// Weights are the fleet's demands, uneven: the last Limiter takes no
// leases.
var Weights = []float64{1, 1, 1, 1, 2, 2, 4, 8, 2}

// Fleet is a run's outcome: what each Limiter admitted in steady state,
// the longest each waited for an admission after a denial, and every
// admission.
type Fleet struct {
	Admitted []int
	Starved  []time.Duration
	All      []Admission
	Share    float64 // of the policy's rate, in steady state
	Offered  float64 // the demand made, as a multiple of the rate
}

// Options adjust a run.
type Options struct {
	TTL      time.Duration // leases; 0 for none
	Duration time.Duration // default 1.2s, the first 200ms not steady
	// Setup, if set, is called with each Limiter before the run.
	Setup func(i int, lim *ratekeeper.Limiter)
	// Errors, if set, decides whether a Limiter's error is expected
	// (the request then counts as denied); any error fails t otherwise.
	Errors func(err error) bool
	// Timeout, if set, bounds each request.
	Timeout time.Duration
	// MinShare is the least share of the rate the fleet must admit in
	// steady state: 0.95 when 0, none when negative.
	MinShare float64
	// Demand is the fleet's demand as a multiple of the rate: 2 when 0.
	Demand float64
}

// Run runs Weights' fleet on key, with demand of o.Demand times the
// policy's rate in Poisson arrivals, each Limiter on a store of its own from open, and
// checks the bound and that the fleet admitted at least 95% of the rate
// in steady state (o.MinShare), but with -short, where only the bound is
// checked.
func Run(t *testing.T, c Case, key string, open func() ratekeeper.Store, o Options) Fleet {
	t.Helper()
	if o.Duration == 0 {
		o.Duration = 1200 * time.Millisecond
	}
	if o.Demand == 0 {
		o.Demand = 2
	}
	var total float64
	for _, w := range Weights {
		total += w
	}
	ctx := context.Background()
	var mu sync.Mutex
	var offered atomic.Int64 // requests made in steady state
	f := Fleet{Admitted: make([]int, len(Weights)), Starved: make([]time.Duration, len(Weights))}
	var wg sync.WaitGroup
	begin := time.Now()
	steady := begin.Add(200 * time.Millisecond)
	for i, w := range Weights {
		var opts []ratekeeper.Option
		if i < len(Weights)-1 && o.TTL > 0 {
			opts = append(opts, ratekeeper.WithLeases(ratekeeper.Leases{TTL: o.TTL}))
		}
		lim, err := ratekeeper.New(open(), c.Policy, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if o.Setup != nil {
			o.Setup(i, lim)
		}
		pace := float64(time.Second) / (o.Demand * c.Rate * w / total)
		wg.Go(func() {
			defer lim.Close()
			var mine []Admission
			var denied time.Time // the first denial since the last admission
			// Poisson arrivals: a fixed pace would lock in phase with
			// the others' and the refill's, and starve one Limiter by
			// its timing alone, with leases or without.
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for next := begin; time.Since(begin) < o.Duration; next = next.Add(time.Duration(r.ExpFloat64() * pace)) {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				lo := time.Now()
				if lo.After(steady) {
					offered.Add(1)
				}
				rctx, cancel := ctx, context.CancelFunc(func() {})
				if o.Timeout > 0 {
					rctx, cancel = context.WithTimeout(ctx, o.Timeout)
				}
				res, err := lim.Allow(rctx, key)
				cancel()
				hi := time.Now()
				if err != nil && (o.Errors == nil || !o.Errors(err)) {
					t.Error(err)
					return
				}
				if err != nil || !res.Allowed {
					if denied.IsZero() {
						denied = lo
					}
					continue
				}
				mine = append(mine, Admission{lo.UnixMicro(), hi.UnixMicro()})
				if lo.After(steady) {
					f.Admitted[i]++
					if !denied.IsZero() && denied.After(steady) {
						f.Starved[i] = max(f.Starved[i], lo.Sub(denied))
					}
				}
				denied = time.Time{}
			}
			mu.Lock()
			f.All = append(f.All, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	Check(t, c, f.All)
	var sum int
	for _, n := range f.Admitted {
		sum += n
	}
	steadyFor := c.Rate * (o.Duration - 200*time.Millisecond).Seconds()
	f.Share = float64(sum) / steadyFor
	f.Offered = float64(offered.Load()) / steadyFor
	t.Logf("%s, leases of %v, demand %g× the rate (%.2f× made): %d admitted in all; in steady state %.1f%% of the rate, per Limiter %v; longest waits after a denial %v",
		c.Name, o.TTL, o.Demand, f.Offered, len(f.All), 100*f.Share, f.Admitted, f.Starved)
	if o.MinShare == 0 {
		o.MinShare = 0.95
	}
	switch {
	case testing.Short():
		// The bound holds however busy the machine is; the share of the
		// rate is measured alone, without the race detector (make test
		// runs this package so after the rest).
	case f.Offered < 0.75*o.Demand:
		// A machine too busy to make the demand asked for (the race
		// detector, other tests) cannot show the share it would get.
		t.Logf("only %.2f× the rate was asked for, not %g×: the share is not checked", f.Offered, o.Demand)
	case o.MinShare > 0 && f.Share < o.MinShare:
		t.Errorf("leases of %v: the fleet admitted %.1f%% of the policy's rate, at a demand of %.2f× the rate; want at least %.0f%%", o.TTL, 100*f.Share, f.Offered, 100*o.MinShare)
	}
	return f
}

// Check fails t if the admissions pass c's bound in any window.
func Check(t *testing.T, c Case, adm []Admission) {
	t.Helper()
	if worst, over := c.Bound(adm); over > 0 {
		t.Errorf("%s: %d over the bound: %s", c.Name, over, worst)
	}
}
