package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The edges of Charge and Refund where the largest costs meet the
// longest periods and window boundaries, each with the exact answer.

// testRefundOfMaxLimit: a refund of MaxLimit on a GCRA of one a day,
// where MaxLimit emission intervals pass 2^63 µs, leaves a fresh key.
func (ts *suite) testRefundOfMaxLimit(t *testing.T) {
	ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.GCRA{Rate: 1, Period: 24 * time.Hour, Burst: 1})
		forget(t, lim, "k")
		res, err := lim.Allow(ctx, "k")
		testutil.WantResult(t, "Allow", res, err, true, 0)
		res, err = lim.Refund(ctx, "k", ratekeeper.MaxLimit)
		testutil.WantResult(t, "Refund(MaxLimit)", res, err, true, 1)
		if res.RetryAfter != 0 || res.ResetAfter != 0 {
			t.Fatalf("Refund(MaxLimit) = %+v: want a fresh key, full", res)
		}
		// One interval short of emptying: the rest stays.
		lim.Allow(ctx, "k")
		res, err = lim.Charge(ctx, "k", 2)
		testutil.WantResult(t, "Charge(2)", res, err, false, -2)
		res, err = lim.Refund(ctx, "k", 2)
		testutil.WantResult(t, "Refund(2) of 3 taken", res, err, false, 0)
		if res.ResetAfter != 24*time.Hour {
			t.Fatalf("Refund(2) of 3 taken = %+v: want ResetAfter 24h", res)
		}
	})
}

// testSlidingCounterDebtBound: two charges of MaxLimit a microsecond
// apart across a window's boundary leave a debt of at most MaxLimit, the
// documented bound: the second is capped.
func (ts *suite) testSlidingCounterDebtBound(t *testing.T) {
	ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.SlidingWindowCounter{Limit: 10, Window: time.Minute})
		forget(t, lim, "k")
		// The window's last microsecond.
		window := time.Minute.Microseconds()
		clock.Advance(time.Duration(window-1-clock.Now().UnixMicro()%window) * time.Microsecond)
		res, err := lim.Charge(ctx, "k", ratekeeper.MaxLimit)
		testutil.WantResult(t, "Charge(MaxLimit) in a window's last µs", res, err, false, 10-ratekeeper.MaxLimit)
		if res.Capped {
			t.Fatalf("Charge(MaxLimit) on a fresh key = %+v: capped", res)
		}
		clock.Advance(time.Microsecond) // the next window's first
		res, err = lim.Charge(ctx, "k", ratekeeper.MaxLimit)
		testutil.WantResult(t, "Charge(MaxLimit) in the next window's first µs", res, err, false, -ratekeeper.MaxLimit)
		if !res.Capped {
			t.Fatalf("a second Charge(MaxLimit) = %+v: want Capped, at the bound", res)
		}
	})
}

// testAllChargeRetryAfter: after a charge, an All's Result is the policy
// that holds a request of cost 1 back the longest, whichever the charge
// fitted in.
func (ts *suite) testAllChargeRetryAfter(t *testing.T) {
	ts.forEachCharger(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.All(
			ratekeeper.Named("hourly", ratekeeper.FixedWindow{Limit: 2, Window: time.Hour}),
			ratekeeper.Named("burst", ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1})))
		forget(t, lim, "k")
		res, err := lim.Charge(ctx, "k", 2)
		testutil.WantResult(t, "Charge(2)", res, err, false, 0)
		if res.Policy != "hourly" || res.RetryAfter != time.Hour {
			t.Fatalf("Charge(2) = %+v: want the hourly window's RetryAfter of 1h", res)
		}
		clock.Advance(res.RetryAfter - time.Microsecond)
		if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
			t.Fatalf("Allow a µs before RetryAfter = %+v, %v; want denied", res, err)
		}
		clock.Advance(time.Microsecond)
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow at RetryAfter = %+v, %v; want allowed", res, err)
		}
		// A refund reports the same way: the longest wait of cost 1.
		lim.Charge(ctx, "k", 5)
		res, err = lim.Refund(ctx, "k", 1)
		if err != nil || res.Policy != "hourly" || res.RetryAfter != time.Hour {
			t.Fatalf("Refund(1) in the window's debt = %+v, %v; want the hourly window's RetryAfter", res, err)
		}
	})
}

// testPeekForgetsNothing: a peek at or after a key's expiry consumes
// nothing, so it forgets nothing either: a clock that then steps back
// finds the request taken before it.
func (ts *suite) testPeekForgetsNothing(t *testing.T) {
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 1, Window: time.Second})
		forget(t, lim, "k")
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
		clock.Advance(time.Second)
		if res, err := lim.Peek(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Peek a window later = %+v, %v; want allowed", res, err)
		}
		clock.Advance(-500 * time.Millisecond)
		res, err := lim.Allow(ctx, "k")
		if err != nil || res.Allowed || res.RetryAfter != 500*time.Millisecond {
			t.Fatalf("Allow after the clock stepped back into the window = %+v, %v; want denied for 500ms", res, err)
		}
	})
}

// checkInvariants fails t unless res, a model's Result in mode, keeps
// the documented bounds: no debt beyond MaxLimit, no negative time, and an
// All that answers for the part holding the next request back the
// longest, allowed only when every part is.
func checkInvariants(t *testing.T, what string, mode driver.Mode, res ratekeeper.Result) {
	t.Helper()
	parts := res.Parts
	if len(parts) == 0 {
		parts = []ratekeeper.Result{res}
	}
	allowed, longest := true, time.Duration(0)
	for _, p := range parts {
		if p.Remaining < -ratekeeper.MaxLimit || p.RetryAfter < 0 || p.ResetAfter < 0 {
			t.Fatalf("%s: %v: %+v passes a bound: Remaining below −MaxLimit, or a negative time", what, mode, p)
		}
		allowed, longest = allowed && p.Allowed, max(longest, p.RetryAfter)
	}
	if res.Allowed != allowed || res.RetryAfter != longest {
		t.Fatalf("%s: %v: %+v: want Allowed %t and the longest RetryAfter of its parts, %v", what, mode, res, allowed, longest)
	}
}
