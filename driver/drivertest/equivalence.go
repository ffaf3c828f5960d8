package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// Fixed seeds keep failures reproducible.
var seeds = []uint64{1, 2, 3}

// runSeeds returns the seeds the random sequences run with: all of them,
// or only the first under -short (testing.Short), so that a quick run
// still checks every policy once and a full run checks them three times.
func runSeeds() []uint64 {
	if testing.Short() {
		return seeds[:1]
	}
	return seeds
}

const equivalenceSteps = 10_000

// testRandomEquivalence requires the store to return the Go model's
// Result for every request of long random sequences of requests, charges
// and refunds (if the store is a driver.Charger; of up to three times
// what the policy admits at once, and now and then of MaxLimit), on a
// clock that now and then steps back; and every Result to keep the
// documented bounds (checkInvariants).
func (ts *suite) testRandomEquivalence(t *testing.T) {
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			// The seeds run at once too: with a remote store, each run
			// spends most of its time waiting for it.
			var wg sync.WaitGroup
			for _, seed := range runSeeds() {
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
	store := ts.open(t, clock.Now)
	_, charges := store.(driver.Charger) // an optional interface
	lim := newLimiter(t, store, pc.policy)
	forget(t, lim, key)
	spec := lim.Spec()
	m := testutil.NewModel(spec)
	g := newStepGen(seed, pc, spec)
	modes := rand.New(rand.NewPCG(seed, 2))
	// Now and then the clock steps back, up to two windows, as far as
	// a store's expiries allow (see expiryFloor).
	back := rand.New(rand.NewPCG(seed, 1))
	var floor expiryFloor
	var counts struct{ allowed, denied, debts, refunds int }
	for i := range equivalenceSteps {
		d, n := g.next()
		mode := driver.Take
		switch p := modes.IntN(200); {
		case !charges:
		case p < 2:
			// The largest costs, where a debt meets its bound and a
			// refund's arithmetic its widest range.
			mode, n = driver.Charge, ratekeeper.MaxLimit-modes.Int64N(2)
		case p < 4:
			mode, n = driver.Refund, ratekeeper.MaxLimit-modes.Int64N(2)
		case p < 30:
			mode, n = driver.Charge, modes.Int64N(3*spec.MaxCost()+1)
		case p < 54:
			mode, n = driver.Refund, modes.Int64N(2*spec.MaxCost()+1)
		}
		if back.IntN(30) == 0 {
			d = floor.back(clock.Now().UnixMicro(), -g.fraction(2*g.window))
		}
		clock.Advance(d)
		now := clock.Now().UnixMicro()
		floor.before(now)
		before := m.String()
		want := m.DecideMode(now, n, mode)
		got, err := costCall(lim, mode)(ctx, key, n)
		if err != nil {
			t.Fatalf("seed %d, step %d: %v(%d): %v", seed, i, mode, n, err)
		}
		if testutil.DiffResult(got, want) != "" {
			t.Fatalf("seed %d, step %d, %+v: %v of %d at start+%v (after a step of %v), from %s:\nmodel %+v\nstore %+v",
				seed, i, pc.policy, mode, n, clock.Elapsed(), d, before, want, got)
		}
		checkInvariants(t, fmt.Sprintf("seed %d, step %d, %+v", seed, i, pc.policy), mode, want)
		floor.after(now, n, mode, want)
		switch {
		case mode == driver.Charge && want.Remaining < 0:
			counts.debts++
		case mode == driver.Refund && n > 0 && m.String() != before:
			counts.refunds++
		case mode == driver.Take && want.Allowed:
			counts.allowed++
		case mode == driver.Take:
			counts.denied++
		}
	}
	// A sequence that never denies (or never allows), never goes into
	// debt or never refunds anything compares little.
	if counts.allowed == 0 || counts.denied == 0 || charges && (counts.debts == 0 || counts.refunds == 0) {
		t.Fatalf("seed %d: %+v: the random steps do not exercise %+v", seed, counts, pc.policy)
	}
}

// costCall is a Limiter's method for a mode.
func costCall(lim *ratekeeper.Limiter, mode driver.Mode) func(context.Context, string, int64) (ratekeeper.Result, error) {
	switch mode {
	case driver.Charge:
		return lim.Charge
	case driver.Refund:
		return lim.Refund
	}
	return lim.AllowN
}
