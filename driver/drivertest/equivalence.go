package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// Fixed seeds keep failures reproducible.
var seeds = []uint64{1, 2, 3}

const equivalenceSteps = 10_000

// testRandomEquivalence requires the store to return the Go model's
// Result for every request of long random sequences, on a clock that now
// and then steps back.
func (ts *suite) testRandomEquivalence(t *testing.T) {
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			// The seeds run at once too: with a remote store, each run
			// spends most of its time waiting for it.
			var wg sync.WaitGroup
			for _, seed := range seeds {
				wg.Go(func() {
					t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
						ts.checkEquivalence(t, pc, seed)
					})
				})
			}
			wg.Wait()
		})
	}
}

func (ts *suite) checkEquivalence(t *testing.T, pc policyCase, seed uint64) {
	ctx := context.Background()
	const key = "k"
	clock := newClock()
	lim := newLimiter(t, ts.open(t, clock.Now), pc.policy)
	forget(t, lim, key)
	m := testutil.NewModel(lim.Spec())
	g := newStepGen(seed, pc, lim.Spec())
	// Now and then the clock steps back, up to two windows, as far as
	// a store's expiries allow (see expiryFloor).
	back := rand.New(rand.NewPCG(seed, 1))
	var floor expiryFloor
	var allowed, denied int
	for i := range equivalenceSteps {
		d, n := g.next()
		if back.IntN(30) == 0 {
			d = floor.back(clock.Now().UnixMicro(), -g.fraction(2*g.window))
		}
		clock.Advance(d)
		now := clock.Now().UnixMicro()
		floor.before(now)
		want := m.Decide(now, n)
		got, err := lim.AllowN(ctx, key, n)
		if err != nil {
			t.Fatalf("seed %d, step %d: AllowN(%d): %v", seed, i, n, err)
		}
		if testutil.DiffResult(got, want) != "" {
			t.Fatalf("seed %d, step %d, %+v: cost %d at start+%v (after a step of %v):\nmodel %+v\nstore %+v",
				seed, i, pc.policy, n, clock.Elapsed(), d, want, got)
		}
		floor.after(now, n, want)
		if want.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	// A sequence that never denies (or never allows) compares little.
	if allowed == 0 || denied == 0 {
		t.Fatalf("seed %d: %d allowed and %d denied: the random steps do not exercise %+v",
			seed, allowed, denied, pc.policy)
	}
}
