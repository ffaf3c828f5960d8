package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

const twinSteps = 1_000

// testExpiryNeverChangesDecisions runs twin keys A and B through the same
// random requests, and forgets B (as expiry does) as soon as its latest
// Result says it is full again. Every Result of A and B must be identical.
func (ts *suite) testExpiryNeverChangesDecisions(t *testing.T) {
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "a", "b")
				// A seed of its own: sequences that TestRandomEquivalence does not run.
				g := newStepGen(4, pc, lim.Spec())
				var deadline time.Time // when B is full again, by its latest Result
				forgotten := 0
				for i := range twinSteps {
					d, n := g.next()
					clock.Advance(d)
					now := clock.Now()
					if !deadline.IsZero() && !now.Before(deadline) {
						if err := lim.Reset(ctx, "b"); err != nil {
							t.Fatal(err)
						}
						forgotten++
					}
					a, err := lim.AllowN(ctx, "a", n)
					if err != nil {
						t.Fatal(err)
					}
					b, err := lim.AllowN(ctx, "b", n)
					if err != nil {
						t.Fatal(err)
					}
					if testutil.DiffResult(a, b) != "" {
						t.Fatalf("step %d, cost %d at start+%v (%d resets of B so far):\nkept      %+v\nforgotten %+v",
							i, n, clock.Elapsed(), forgotten, a, b)
					}
					deadline = now.Add(b.ResetAfter)
				}
				if forgotten == 0 {
					t.Fatal("B was never forgotten: the random steps never reach a deadline")
				}
			})
		})
	}
}
