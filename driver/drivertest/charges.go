package drivertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The rules of Charge and Refund, each on a fresh store.

// testDebtBounds charges each policy far beyond what it can hold, until
// its debt meets its bound: every store must report Capped there, and
// agree with the model throughout.
func (ts *suite) testDebtBounds(t *testing.T) {
	// The slowest policies too, whose debts are repaid over MaxPeriod.
	slowest := []policyCase{
		{"gcra1perMaxPeriod", ratekeeper.GCRA{Rate: 1, Period: ratekeeper.MaxPeriod, Burst: 1}, ratekeeper.MaxPeriod},
		{"tb1per1yr", ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: 365 * 24 * time.Hour}, 365 * 24 * time.Hour},
		{"lb1perMaxPeriod", ratekeeper.LeakyBucket{Capacity: 1, LeakRate: 1 / ratekeeper.MaxPeriod.Seconds()}, ratekeeper.MaxPeriod},
	}
	for _, pc := range append(slowest, policies...) {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "k")
				m := testutil.NewModel(lim.Spec())
				capped := false
				for i := 0; i < 200 && !capped; i++ {
					clock.Advance(time.Millisecond)
					now := clock.Now().UnixMicro()
					want := m.DecideMode(now, ratekeeper.MaxLimit, driver.Charge)
					got, err := lim.Charge(ctx, "k", ratekeeper.MaxLimit)
					if err != nil {
						t.Fatal(err)
					}
					if d := testutil.DiffResult(got, want); d != "" {
						t.Fatalf("charge %d: %s", i, d)
					}
					capped = got.Capped
					if got.Allowed || got.Remaining >= 0 {
						t.Fatalf("charge %d of %d = %+v: allowed, or not in debt", i, ratekeeper.MaxLimit, got)
					}
				}
				if !capped {
					t.Fatalf("200 charges of %d never met the debt's bound", ratekeeper.MaxLimit)
				}
				// Still in debt, and denied, at the bound.
				res, err := lim.Peek(ctx, "k")
				if err != nil || res.Allowed || res.Remaining >= 0 || res.RetryAfter <= 0 {
					t.Fatalf("Peek at the bound = %+v, %v; want denied, in debt", res, err)
				}
			})
		})
	}
}

// debtCases are a limit of 10 under each algorithm, for the examples of
// the rules of Charge and Refund.
var debtCases = []policyCase{
	{"tb", ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second}, time.Second},
	{"gcra", ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 10}, time.Second},
	{"fw", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute}, time.Minute},
	{"fwa", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute, Aligned: true}, time.Minute},
	{"swl", ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Minute}, time.Minute},
	{"swc", ratekeeper.SlidingWindowCounter{Limit: 10, Window: time.Minute}, time.Minute},
	{"lb", ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 1}, time.Second},
	{"all", ratekeeper.All(
		ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second},
		ratekeeper.SlidingWindowLog{Limit: 20, Window: 5 * time.Second}), time.Second},
}

// testChargeIntoDebt: a charge of 25 on a fresh limit of 10 takes all 25
// and leaves −15; the next request is denied until time repays the debt,
// and a refund gives back, never beyond full.
func (ts *suite) testChargeIntoDebt(t *testing.T) {
	for _, pc := range debtCases {
		t.Run(pc.name, func(t *testing.T) {
			ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "k", "never")
				res, err := lim.Charge(ctx, "k", 25)
				testutil.WantResult(t, "Charge(25)", res, err, false, -15)
				if res.RetryAfter <= 0 || res.Capped {
					t.Fatalf("Charge(25) = %+v: want a RetryAfter, not Capped", res)
				}
				// Denied until RetryAfter, allowed from then on.
				clock.Advance(res.RetryAfter - time.Microsecond)
				if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed || res.Remaining >= 1 {
					t.Fatalf("Allow a µs before RetryAfter = %+v, %v; want denied", res, err)
				}
				clock.Advance(time.Microsecond)
				if res, err := lim.Peek(ctx, "k"); err != nil || !res.Allowed {
					t.Fatalf("Peek at RetryAfter = %+v, %v; want allowed", res, err)
				}
				// A refund of far more than was taken fills it, no more.
				res, err = lim.Refund(ctx, "k", ratekeeper.MaxLimit)
				testutil.WantResult(t, "Refund(MaxLimit)", res, err, true, 10)
				if res.ResetAfter != 0 && pc.name != "all" {
					t.Fatalf("Refund(MaxLimit) = %+v: want full", res)
				}
				// A refund on a key never used changes nothing.
				res, err = lim.Refund(ctx, "never", 5)
				testutil.WantResult(t, "Refund on a fresh key", res, err, true, 10)
				res, err = lim.AllowN(ctx, "never", 10)
				testutil.WantResult(t, "AllowN(10) after it", res, err, true, 0)
				if res, err := lim.Allow(ctx, "never"); err != nil || res.Allowed {
					t.Fatalf("Allow after all 10 = %+v, %v: a refund on a fresh key let more through", res, err)
				}
				// A charge that fits is allowed, as a take would be; its
				// RetryAfter is for the next request, of cost 1.
				res, err = lim.Charge(ctx, "k", 4)
				testutil.WantResult(t, "Charge(4) when full", res, err, true, 6)
				if res.RetryAfter != 0 {
					t.Fatalf("Charge(4) when full = %+v: want RetryAfter 0, a request of cost 1 passes", res)
				}
				res, err = lim.Charge(ctx, "k", 6)
				testutil.WantResult(t, "Charge(6) of the last 6", res, err, true, 0)
				if res.RetryAfter <= 0 {
					t.Fatalf("Charge(6) of the last 6 = %+v: want the RetryAfter of a request of cost 1", res)
				}
				// A negative cost is an error.
				if _, err := lim.Charge(ctx, "k", -1); !errors.Is(err, ratekeeper.ErrInvalidCost) {
					t.Fatalf("Charge(-1): %v, want ErrInvalidCost", err)
				}
				if _, err := lim.Refund(ctx, "k", -1); !errors.Is(err, ratekeeper.ErrInvalidCost) {
					t.Fatalf("Refund(-1): %v, want ErrInvalidCost", err)
				}
			})
		})
	}
}

// testFixedWindowForgetsDebt: a fixed window's debt ends with the window.
func (ts *suite) testFixedWindowForgetsDebt(t *testing.T) {
	ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 10, Window: time.Minute})
		forget(t, lim, "k")
		res, err := lim.Charge(ctx, "k", 1000)
		testutil.WantResult(t, "Charge(1000)", res, err, false, -990)
		if res.RetryAfter != time.Minute {
			t.Fatalf("Charge(1000) = %+v: want RetryAfter the window's end", res)
		}
		clock.Advance(time.Minute)
		res, err = lim.Allow(ctx, "k")
		testutil.WantResult(t, "Allow in the next window", res, err, true, 9)
	})
}

// testSlidingLogRefundsNewest: a refund takes its units back from the
// newest entries, so the oldest still leave first.
func (ts *suite) testSlidingLogRefundsNewest(t *testing.T) {
	ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Minute})
		forget(t, lim, "k")
		lim.AllowN(ctx, "k", 4) // at 0
		clock.Advance(10 * time.Second)
		lim.AllowN(ctx, "k", 6) // at 10 s
		res, err := lim.Refund(ctx, "k", 7)
		testutil.WantResult(t, "Refund(7)", res, err, true, 7)
		// Left: the 3 at 0 s, which leave at 60 s. Had the refund taken
		// from the oldest, 3 of the 10 s entry would be left until 70 s.
		if res.ResetAfter != 50*time.Second {
			t.Fatalf("Refund(7) = %+v: want the entry at 0 s left, resetting in 50s", res)
		}
	})
}

// testConcurrentCharges: charges from many goroutines on one key all
// count.
func (ts *suite) testConcurrentCharges(t *testing.T) {
	for _, pc := range debtCases {
		t.Run(pc.name, func(t *testing.T) {
			ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "k")
				const goroutines, each = 8, 5
				var wg sync.WaitGroup
				for range goroutines {
					wg.Go(func() {
						for range each {
							if _, err := lim.Charge(ctx, "k", 3); err != nil {
								t.Error(err)
							}
						}
					})
				}
				wg.Wait()
				res, err := lim.Peek(ctx, "k")
				testutil.WantResult(t, "Peek after the charges", res, err, false, 10-goroutines*each*3)
			})
		})
	}
}
