package soak

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// The accuracy test's load: many goroutines over several clients (as
// several application servers would be), on enough keys that they
// rarely queue behind one another.
const (
	envDurationName = "RATEKEEPER_SOAK_DURATION"
	clients         = 4
	goroutines      = 128
	numKeys         = 100
	// callSlack bounds the calls still in flight when a run ends.
	callSlack = 30 * time.Second
)

// algorithms are the policies under test: about 10 requests a second per
// key after a burst of 5, far below what 128 goroutines ask of 100 keys,
// so that the limits, not the load, decide what is admitted.
var algorithms = []struct {
	name   string // the subtest
	label  string // the row in the summary table
	desc   string // the policy, per key
	policy ratekeeper.Policy
	// exact: the check must pass. SlidingWindowCounter estimates the
	// rolling window it is checked against, so its excess is only reported.
	exact bool
}{
	{"TokenBucket", "Token bucket", "5, +1 per 100 ms",
		ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: 100 * time.Millisecond}, true},
	{"GCRA", "GCRA", "10 per 1 s, burst 5",
		ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 5}, true},
	{"LeakyBucket", "Leaky bucket", "5, leaking 10/s",
		ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 10}, true},
	{"FixedWindow", "Fixed window", "5 per 500 ms",
		ratekeeper.FixedWindow{Limit: 5, Window: 500 * time.Millisecond}, true},
	{"SlidingWindowLog", "Sliding window log", "5 per 500 ms",
		ratekeeper.SlidingWindowLog{Limit: 5, Window: 500 * time.Millisecond}, true},
	{"SlidingWindowCounter", "Sliding window counter", "5 per 500 ms",
		ratekeeper.SlidingWindowCounter{Limit: 5, Window: 500 * time.Millisecond}, false},
}

// TestAccuracy hammers each algorithm through redisstore and checks that
// no key ever admitted more than an exact limiter could have, whatever the
// order in which Redis received the requests.
func TestAccuracy(t *testing.T) {
	redistest.Addr(t)
	dur := envDuration(t, envDurationName, 3*time.Second)
	rows := []string{
		fmt.Sprintf("%d goroutines over %d clients on %d keys, %v per algorithm:", goroutines, clients, numKeys, dur),
		"",
		"| Algorithm | Policy per key | Decisions | Decisions/s | Admitted | Largest excess |",
		"|---|---|--:|--:|--:|--:|",
	}
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			var r run
			for attempt := 1; ; attempt++ {
				start := time.Now()
				r = hammer(t, a.policy, dur)
				drift := testutil.WallDrift(start)
				if drift.Abs() <= time.Millisecond {
					break
				}
				// Redis reads the wall clock and the check the monotonic one,
				// which the check takes to run at one rate: a step of the
				// wall clock (a paused virtual machine set right on resume)
				// voids the run, not the limiter.
				if attempt == 3 {
					t.Skipf("the wall clock moved %v against the monotonic one in each of 3 runs: the check cannot tell Redis's time", drift)
				}
				t.Logf("the wall clock moved %v against the monotonic one during the run: running it again", drift)
			}
			if r.errors > 0 {
				t.Fatalf("%d of %d decisions failed; the first: %v", r.errors, r.decisions, r.firstErr)
			}
			var admitted int
			var v verdict
			check := checker(a.policy)
			for _, adm := range r.perKey {
				admitted += len(adm)
				v.add(check(adm))
			}
			rate := float64(r.decisions) / r.elapsed.Seconds()
			t.Logf("%s (%s): %d decisions (%.0f/s, %.0f per key per second), %d admitted (%.1f per key per second), largest excess %d",
				a.label, a.desc, r.decisions, rate, rate/numKeys, admitted,
				float64(admitted)/r.elapsed.Seconds()/numKeys, v.excess)
			rows = append(rows, fmt.Sprintf("| %s | %s | %d | %.0f | %d | %d |",
				a.label, a.desc, r.decisions, rate, admitted, v.excess))
			if int64(admitted) == r.decisions {
				t.Errorf("every decision was allowed: the load did not reach the limits")
			}
			if a.exact && v.excess > 0 {
				t.Errorf("a key admitted %d more than an exact limiter could have", v.excess)
			}
			if v.early > 0 {
				t.Errorf("%d windows began less than a window after the previous one", v.early)
			}
		})
	}
	t.Logf("summary:\n%s", strings.Join(rows, "\n"))
}

// run is what hammer saw.
type run struct {
	perKey    [][]admission // each key's admissions, sorted by sent time
	decisions int64
	errors    int64
	firstErr  error
	elapsed   time.Duration
}

// hammer makes Allow calls under policy on numKeys fresh keys from
// goroutines spread over separate clients, for dur, and records every
// admission.
func hammer(t *testing.T, policy ratekeeper.Policy, dur time.Duration) run {
	prefix := redistest.Prefix(t)
	lims := make([]*ratekeeper.Limiter, clients)
	for i := range lims {
		lim, err := ratekeeper.New(redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(prefix)), policy)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = lim
	}
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key%03d", i)
	}

	type keyed struct {
		key int
		admission
	}
	type worker struct {
		adm       []keyed
		decisions int64
		errors    int64
		firstErr  error
	}
	workers := make([]worker, goroutines)
	ctx, cancel := context.WithTimeout(context.Background(), dur+callSlack)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for g := range workers {
		wg.Go(func() {
			w := &workers[g]
			lim := lims[g%clients]
			for {
				sent := time.Since(start)
				if sent >= dur {
					return
				}
				k := rand.IntN(numKeys)
				res, err := lim.Allow(ctx, keys[k])
				done := time.Since(start)
				w.decisions++
				switch {
				case err != nil:
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
				case res.Allowed:
					w.adm = append(w.adm, keyed{k, admission{sent: sent, done: done, opener: isOpener(policy, res)}})
				}
			}
		})
	}
	wg.Wait()

	r := run{perKey: make([][]admission, numKeys), elapsed: time.Since(start)}
	for _, w := range workers {
		r.decisions += w.decisions
		r.errors += w.errors
		if r.firstErr == nil {
			r.firstErr = w.firstErr
		}
		for _, a := range w.adm {
			r.perKey[a.key] = append(r.perKey[a.key], a.admission)
		}
	}
	for _, adm := range r.perKey {
		slices.SortFunc(adm, func(x, y admission) int { return cmp.Compare(x.sent, y.sent) })
	}
	return r
}
