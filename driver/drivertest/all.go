package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// perSecondAndMinute is 2 requests per second and 3 per minute, as fixed
// windows that open at a key's first request.
var perSecondAndMinute = ratekeeper.All(
	ratekeeper.Named("second", ratekeeper.FixedWindow{Limit: 2, Window: time.Second}),
	ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 3, Window: time.Minute}),
)

// part is one policy's Result within an All's.
func part(name string, limit int64, allowed bool, remaining float64, retryAfter, resetAfter time.Duration) ratekeeper.Result {
	return ratekeeper.Result{Policy: name, Allowed: allowed, Limit: limit, Remaining: remaining,
		RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// joined is an All's Result: binding's, with the latest ResetAfter and the
// parts.
func joined(binding int, parts ...ratekeeper.Result) ratekeeper.Result {
	res := parts[binding]
	for _, p := range parts {
		res.ResetAfter = max(res.ResetAfter, p.ResetAfter)
	}
	res.Parts = parts
	return res
}

// testAllScenario works through a per-second and a per-minute limit by
// hand: each binds in turn, and a denial by one takes nothing from the
// other.
func (ts *suite) testAllScenario(t *testing.T) {
	const sec, minute = time.Second, time.Minute
	steps := []struct {
		at   time.Duration
		n    int64 // -1 resets
		want ratekeeper.Result
	}{
		// The second binds: it has the least left.
		{0, 1, joined(0, part("second", 2, true, 1, 0, sec), part("minute", 3, true, 2, 0, minute))},
		{0, 1, joined(0, part("second", 2, true, 0, 0, sec), part("minute", 3, true, 1, 0, minute))},
		// The second denies; the minute would allow, and keeps its 1.
		{0, 1, joined(0, part("second", 2, false, 0, sec, sec), part("minute", 3, true, 1, 0, minute))},
		// A new second; the minute's last request goes.
		{sec, 1, joined(1, part("second", 2, true, 1, 0, sec), part("minute", 3, true, 0, 0, 59*sec))},
		// The minute denies: the second keeps its 1, to the peek too.
		{sec, 1, joined(1, part("second", 2, true, 1, 0, sec), part("minute", 3, false, 0, 59*sec, 59*sec))},
		{sec, 0, joined(1, part("second", 2, true, 1, 0, sec), part("minute", 3, false, 0, 59*sec, 59*sec))},
		// Both deny: the minute binds, as the longer wait.
		{sec + 500*time.Millisecond, 2, joined(1, part("second", 2, false, 1, 500*time.Millisecond, 500*time.Millisecond),
			part("minute", 3, false, 0, 58500*time.Millisecond, 58500*time.Millisecond))},
		// Both windows are over: a cost of 2 takes the second whole.
		{minute, 2, joined(0, part("second", 2, true, 0, 0, sec), part("minute", 3, true, 1, 0, minute))},
		// Reset forgets both.
		{minute, -1, ratekeeper.Result{}},
		{minute, 1, joined(0, part("second", 2, true, 1, 0, sec), part("minute", 3, true, 2, 0, minute))},
	}
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, perSecondAndMinute)
		forget(t, lim, "k")
		var at time.Duration
		for i, st := range steps {
			clock.Advance(st.at - at)
			at = st.at
			if st.n < 0 {
				if err := lim.Reset(ctx, "k"); err != nil {
					t.Fatalf("step %d: Reset: %v", i, err)
				}
				continue
			}
			got, err := lim.AllowN(ctx, "k", st.n)
			if err != nil || testutil.DiffResult(got, st.want) != "" {
				t.Fatalf("step %d: AllowN(%d) at %v = %+v, %v\nwant %+v", i, st.n, at, got, err, st.want)
			}
		}
		// The smallest policy bounds the cost: 3 can never pass.
		if maxCost := lim.Spec().MaxCost(); maxCost != 2 {
			t.Fatalf("MaxCost %d, want the per-second limit, 2", maxCost)
		}
		checkCostTooHigh(t, lim, "k")
	})
}

// testAllSharesStateByName: a policy keeps a key's state under its
// algorithm and name, alone or in an All: limiters whose policies have the
// same algorithm and name share it, and others keep their own.
func (ts *suite) testAllSharesStateByName(t *testing.T) {
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		daily := ratekeeper.Named("daily", ratekeeper.FixedWindow{Limit: 3, Window: 24 * time.Hour})
		search := newLimiter(t, store, ratekeeper.All(ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, daily))
		upload := newLimiter(t, store, ratekeeper.All(ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Second}, daily))
		alone := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 3, Window: 24 * time.Hour})
		forget(t, search, "k")
		forget(t, upload, "k")
		forget(t, alone, "k")
		for i, lim := range []*ratekeeper.Limiter{search, upload, search} {
			if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed || res.Parts[1].Remaining != float64(2-i) {
				t.Fatalf("request %d: %+v, %v; want the shared daily policy at %d", i, res, err, 2-i)
			}
		}
		if res, err := upload.Allow(ctx, "k"); err != nil || res.Allowed || res.Policy != "daily" {
			t.Fatalf("a 4th request: %+v, %v; want a denial by daily", res, err)
		}
		if res, err := alone.Allow(ctx, "k"); err != nil || res.Remaining != 2 {
			t.Fatalf("the lone fixed window: %+v, %v; want its own state", res, err)
		}
		login := newLimiter(t, store, ratekeeper.Named("login", ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}))
		alsoDaily := newLimiter(t, store, daily)
		forget(t, login, "k")
		if res, err := login.Allow(ctx, "k"); err != nil || res.Remaining != 2 {
			t.Fatalf("a fixed window named login: %+v, %v; want its own state", res, err)
		}
		if res, err := alsoDaily.Peek(ctx, "k"); err != nil || res.Allowed {
			t.Fatalf("a lone policy named daily: %+v, %v; want the shared, exhausted, state", res, err)
		}
	})
}
