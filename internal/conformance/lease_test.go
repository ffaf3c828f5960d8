package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// admission is when a request was admitted: between lo and hi, in
// microseconds of wall time (Redis's TIME on this machine). A request
// decided from a lease is admitted within its call; one decided by Redis,
// at some point of its round trip.
type admission struct{ lo, hi int64 }

// leaseBound is the most a policy admits in a span of d microseconds.
type leaseBound func(lo, hi int64) int64

// leaseCase is a policy that takes leases and its bound over any window.
type leaseCase struct {
	name   string
	policy ratekeeper.Policy
	rate   float64 // per second, for the demand
	bound  func(adm []admission) (worst string, over int64)
}

// spanBound checks every window [lo_i, hi_j] of the admissions against
// most(hi_j − lo_i), the most a policy admits in such a span, counting
// only the admissions surely inside it.
func spanBound(most func(d int64) int64) func([]admission) (string, int64) {
	return func(adm []admission) (string, int64) {
		byHi := slices.Clone(adm)
		slices.SortFunc(byHi, func(x, y admission) int { return int(x.hi - y.hi) })
		var worst string
		var over int64
		for _, a := range adm {
			var n int64
			for _, x := range byHi {
				if x.hi < a.lo || x.lo < a.lo {
					continue
				}
				n++
				if excess := n - most(x.hi-a.lo); excess > over {
					over, worst = excess, fmt.Sprintf("%d admitted within [%d, %d]µs", n, a.lo, x.hi)
				}
			}
		}
		return worst, over
	}
}

// windowBound checks every window aligned to w µs against a limit of
// limit, counting only the admissions surely inside it.
func windowBound(limit, w int64) func([]admission) (string, int64) {
	return func(adm []admission) (string, int64) {
		counts := map[int64]int64{}
		for _, a := range adm {
			if a.lo/w == a.hi/w {
				counts[a.lo/w]++
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

var leaseCases = []leaseCase{
	// A burst of 50, then one every 500µs.
	{"gcra2000ps_b50", ratekeeper.GCRA{Rate: 2000, Period: sec, Burst: 50}, 2000,
		spanBound(func(d int64) int64 { return 50 + d/500 })},
	// 50, then 20 at each refill: at most d/10ms + 1 refills in d.
	{"tb50_20per10ms", ratekeeper.TokenBucket{Capacity: 50, RefillRate: 20, RefillInterval: 10 * ms}, 2000,
		spanBound(func(d int64) int64 { return 50 + 20*(d/10_000+1) })},
	{"fwa200per100ms", ratekeeper.FixedWindow{Limit: 200, Window: 100 * ms, Aligned: true}, 2000, windowBound(200, 100_000)},
}

// TestLeasesKeepTheBound: 8 Limiters with leases on one key, each over
// its own client, with uneven demand (1:1:1:1:2:2:4:8, Poisson arrivals)
// of twice the policy's rate, beside a Limiter without leases: no window
// admits more than the policy's bound, the fleet admits at least 95% of
// the rate, and no Limiter that was denied waits for its next admission
// longer than a TTL beyond the longest wait of a Limiter of the same
// demand in the same fleet without leases (a policy at twice its rate
// keeps some waiting by chance, and a fixed window denies everyone until
// it ends).
func TestLeasesKeepTheBound(t *testing.T) {
	const ttl = 50 * ms
	stores := map[string]func(t *testing.T) redis.UniversalClient{
		"redis":         func(t *testing.T) redis.UniversalClient { return redistest.Client(t) },
		"redis-cluster": func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t) },
	}
	for name, client := range stores {
		for _, lc := range leaseCases {
			t.Run(name+"/"+lc.name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				open := func() ratekeeper.Store {
					return redisstore.New(client(t), redisstore.WithKeyPrefix(prefix))
				}
				plain := runLeaseFleet(t, lc, open, 0, "plain")
				leased := runLeaseFleet(t, lc, open, ttl, "hot")
				for i := range leased.starved {
					if leased.starved[i] > plain.starved[i]+ttl || leased.admitted[i] == 0 {
						t.Errorf("Limiter %d, denied, waited up to %v for an admission (%d admitted); without leases up to %v",
							i, leased.starved[i], leased.admitted[i], plain.starved[i])
					}
				}
			})
		}
	}
}

// fleetRun is what a fleet admitted, per Limiter, in steady state, and
// the longest each waited for an admission after a denial.
type fleetRun struct {
	admitted []int
	starved  []time.Duration
}

// runLeaseFleet runs the fleet of TestLeasesKeepTheBound on key, with
// leases of ttl (0: without), on stores that open returns, one per
// Limiter, and checks the bound and the share of the rate admitted.
func runLeaseFleet(t *testing.T, lc leaseCase, open func() ratekeeper.Store, ttl time.Duration, key string) fleetRun {
	const d = 1200 * ms
	weights := []float64{1, 1, 1, 1, 2, 2, 4, 8, 2} // the last without leases
	var total float64
	for _, w := range weights {
		total += w
	}
	ctx := context.Background()
	var mu sync.Mutex
	var all []admission
	run := fleetRun{admitted: make([]int, len(weights)), starved: make([]time.Duration, len(weights))}
	var wg sync.WaitGroup
	begin := time.Now()
	steady := begin.Add(200 * ms)
	for i, w := range weights {
		var opts []ratekeeper.Option
		if i < len(weights)-1 && ttl > 0 {
			opts = append(opts, ratekeeper.WithLeases(ratekeeper.Leases{TTL: ttl}))
		}
		lim, err := ratekeeper.New(open(), lc.policy, opts...)
		if err != nil {
			t.Fatal(err)
		}
		pace := float64(time.Second) / (2 * lc.rate * w / total)
		wg.Go(func() {
			defer lim.Close()
			var mine []admission
			var denied time.Time // the first denial since the last admission
			// Poisson arrivals: a fixed pace would lock in phase with
			// the others' and the refill's, and starve one Limiter by
			// its timing alone, with leases or without.
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for next := begin; time.Since(begin) < d; next = next.Add(time.Duration(r.ExpFloat64() * pace)) {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				lo := time.Now()
				res, err := lim.Allow(ctx, key)
				hi := time.Now()
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					if denied.IsZero() {
						denied = lo
					}
					continue
				}
				mine = append(mine, admission{lo.UnixMicro(), hi.UnixMicro()})
				if lo.After(steady) {
					run.admitted[i]++
					if !denied.IsZero() && denied.After(steady) {
						run.starved[i] = max(run.starved[i], lo.Sub(denied))
					}
				}
				denied = time.Time{}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(all, func(x, y admission) int { return int(x.lo - y.lo) })
	if worst, over := lc.bound(all); over > 0 {
		t.Errorf("leases of %v: %d over the bound: %s", ttl, over, worst)
	}
	var sum int
	for _, n := range run.admitted {
		sum += n
	}
	share := float64(sum) / (lc.rate * (d - 200*ms).Seconds())
	t.Logf("%s, leases of %v: %d admitted in all; in steady state %.1f%% of the rate, per Limiter %v; longest waits after a denial %v",
		lc.name, ttl, len(all), 100*share, run.admitted, run.starved)
	if share < 0.95 {
		t.Errorf("leases of %v: the fleet admitted %.1f%% of the policy's rate, at twice its demand", ttl, 100*share)
	}
	return run
}
