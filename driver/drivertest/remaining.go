package drivertest

import (
	"context"
	"math"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// testRemainingIsWhatPasses holds every algorithm to one meaning of
// Result.Remaining, whether it reports fractions or whole requests: after
// random traffic, a request of cost ⌊Remaining⌋ passes at once, and one of
// ⌊Remaining⌋ + 1 does not.
func (ts *suite) testRemainingIsWhatPasses(t *testing.T) {
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "k")
				spec := lim.Spec()
				g := newStepGen(5, pc, spec)
				full, partial := 0, 0
				for i := range 300 {
					d, n := g.next()
					clock.Advance(d)
					if _, err := lim.AllowN(ctx, "k", n); err != nil {
						t.Fatalf("request %d: AllowN(%d): %v", i, n, err)
					}
					peek, err := lim.Peek(ctx, "k")
					if err != nil {
						t.Fatalf("request %d: Peek: %v", i, err)
					}
					r := int64(math.Floor(peek.Remaining))
					if r+1 <= spec.MaxCost() {
						res, err := lim.AllowN(ctx, "k", r+1)
						if err != nil || res.Allowed {
							t.Fatalf("request %d: Remaining %v, but AllowN(%d) = %+v, %v", i, peek.Remaining, r+1, res, err)
						}
						partial++
					} else {
						full++
					}
					if r > 0 {
						res, err := lim.AllowN(ctx, "k", r)
						if err != nil || !res.Allowed {
							t.Fatalf("request %d: Remaining %v, but AllowN(%d) = %+v, %v", i, peek.Remaining, r, res, err)
						}
					}
				}
				if partial == 0 {
					t.Fatalf("the key was full at every check (%d times)", full)
				}
			})
		})
	}
}
