package conformance

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The race of costs known afterwards: 32 concurrent calls, each
// estimated at 1,000 and costing 900 to 1,100, against a budget of 10,000
// a minute.
const (
	raceCalls    = 32
	raceEstimate = 1000
	raceBudget   = 10000
)

// raceActual is call i's real cost, 900 to 1,100.
func raceActual(i int) int64 { return 900 + int64(i*37%201) }

// TestReserveThenSettleRace: reserved then settled, the calls admitted
// use at most the budget plus their own overshoots (actual − estimate),
// and exactly their real costs; checked then charged, every call passes
// its check before any is charged, and the budget is exceeded several
// times over.
func TestReserveThenSettleRace(t *testing.T) {
	forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		budget := ratekeeper.FixedWindow{Limit: raceBudget, Window: time.Minute}

		t.Run("reserve-then-settle", func(t *testing.T) {
			lim := newLimiter(t, store, budget)
			forget(t, lim, "tenant")
			var (
				admitted, overshoot, actuals atomic.Int64
				wg                           sync.WaitGroup
				start                        = make(chan struct{})
			)
			for i := range raceCalls {
				wg.Go(func() {
					<-start
					r, err := lim.Reserve(ctx, "tenant", raceEstimate)
					if err != nil {
						t.Error(err)
						return
					}
					if !r.Result().Allowed {
						return
					}
					actual := raceActual(i)
					admitted.Add(1)
					actuals.Add(actual)
					overshoot.Add(max(0, actual-raceEstimate))
					if _, err := r.Settle(ctx, actual); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			res, err := lim.Peek(ctx, "tenant")
			if err != nil {
				t.Fatal(err)
			}
			usage := int64(raceBudget - res.Remaining)
			bound := raceBudget + overshoot.Load()
			t.Logf("reserve then settle: %d of %d calls admitted, usage %d, bound %d (budget %d + overshoots %d)",
				admitted.Load(), raceCalls, usage, bound, raceBudget, overshoot.Load())
			if usage > bound {
				t.Errorf("usage %d exceeds the budget plus the admitted calls' overshoots, %d", usage, bound)
			}
			if usage != actuals.Load() {
				t.Errorf("usage %d, want the admitted calls' real costs, %d", usage, actuals.Load())
			}
			if admitted.Load() == 0 || admitted.Load() == raceCalls {
				t.Errorf("%d of %d calls admitted: the race decided nothing", admitted.Load(), raceCalls)
			}
		})

		t.Run("check-then-charge", func(t *testing.T) {
			lim := newLimiter(t, store, budget)
			forget(t, lim, "tenant")
			var (
				admitted, overshoot atomic.Int64
				checked, wg         sync.WaitGroup
				start               = make(chan struct{})
			)
			checked.Add(raceCalls)
			for i := range raceCalls {
				wg.Go(func() {
					<-start
					res, err := lim.Peek(ctx, "tenant")
					allowed := err == nil && res.Allowed
					checked.Done()
					if err != nil {
						t.Error(err)
						return
					}
					// Every call checks before any is charged: the
					// requests of one moment, each awaiting its answer.
					checked.Wait()
					if !allowed {
						return
					}
					actual := raceActual(i)
					admitted.Add(1)
					overshoot.Add(max(0, actual-raceEstimate))
					if _, err := lim.Charge(ctx, "tenant", actual); err != nil {
						t.Error(err)
					}
				})
			}
			close(start)
			wg.Wait()
			res, err := lim.Peek(ctx, "tenant")
			if err != nil {
				t.Fatal(err)
			}
			usage := int64(raceBudget - res.Remaining)
			bound := raceBudget + overshoot.Load()
			t.Logf("check then charge: %d of %d calls admitted, usage %d, bound %d (%.1f times the budget)",
				admitted.Load(), raceCalls, usage, bound, float64(usage)/raceBudget)
			if usage <= 2*raceBudget || usage <= bound {
				t.Errorf("check then charge used %d, within twice the budget or the bound %d: the race did not show", usage, bound)
			}
		})
	})
}
