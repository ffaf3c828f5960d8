package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The expected Results are worked out by hand in the comments. A window
// opens at the first request that finds none open and lasts Window; a
// request passes when the window's count plus its cost is at most Limit.
// RetryAfter and ResetAfter are both the end of the window.
var fwScenarios = []scenario{
	{
		name:   "the window starts at the first request",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			// A peek opens no window.
			{n: 0, want: ok(3, 0)},
			{at: 300 * ms, n: 1, want: ok(2, 1*sec)},
			{at: 800 * ms, n: 1, want: ok(1, 500*ms)},
			{at: 800 * ms, n: 1, want: ok(0, 500*ms)},
			{at: 800 * ms, n: 1, want: denied(0, 500*ms, 500*ms)},
			{at: 800 * ms, n: 0, want: denied(0, 500*ms, 500*ms)},
			{at: 1_299_999 * us, n: 1, want: denied(0, 1*us, 1*us)},
			// The next window opens at 1.3s, not at a multiple of Window.
			{at: 1300 * ms, n: 1, want: ok(2, 1*sec)},
		},
	},
	{
		name:   "denied requests do not count; a cost is taken whole or not at all",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 2, want: ok(1, 1*sec)},
			{at: 100 * ms, n: 2, want: denied(1, 900*ms, 900*ms)},
			{at: 100 * ms, n: 3, want: denied(1, 900*ms, 900*ms)},
			{at: 100 * ms, peek: true, want: ok(1, 900*ms)},
			{at: 100 * ms, n: 1, want: ok(0, 900*ms)},
			{at: 100 * ms, n: 1, want: denied(0, 900*ms, 900*ms)},
			// The next window admits the whole Limit at once.
			{at: 1 * sec, n: 3, want: ok(0, 1*sec)},
		},
	},
	{
		name:   "a peek consumes nothing and answers for cost 1",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			{peek: true, want: ok(3, 0)},
			{n: 1, want: ok(2, 1*sec)},
			{at: 200 * ms, n: 0, want: ok(2, 800*ms)},
			{at: 200 * ms, peek: true, want: ok(2, 800*ms)},
			{at: 200 * ms, n: 2, want: ok(0, 800*ms)},
			{at: 200 * ms, n: 0, want: denied(0, 800*ms, 800*ms)},
			{at: 200 * ms, peek: true, want: denied(0, 800*ms, 800*ms)},
		},
	},
	{
		name:   "Reset forgets the window",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 3, want: ok(0, 1*sec)},
			{n: 1, want: denied(0, 1*sec, 1*sec)},
			{at: 400 * ms, reset: true},
			{at: 400 * ms, n: 0, want: ok(3, 0)},
			// A new window opens at 0.4s.
			{at: 400 * ms, n: 1, want: ok(2, 1*sec)},
			{at: 1_399_999 * us, n: 3, want: denied(2, 1*us, 1*us)},
		},
	},
	{
		// The known trade-off of fixed windows: a client may pass close
		// to 2×Limit across a window boundary. As the window opens at its
		// first request, that request sits at its start, so a short span
		// holds Limit−1 at the end of one window and Limit at the start of
		// the next; an exact rolling window would have admitted 1 at 1s.
		name:   "almost 2×Limit within a microsecond across a window boundary",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 1, want: ok(2, 1*sec)},
			{at: 999_999 * us, n: 2, want: ok(0, 1*us)},
			{at: 1 * sec, n: 3, want: ok(0, 1*sec)},
		},
	},
	{
		name:   "the key is fresh again exactly at ResetAfter",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 3, want: ok(0, 1*sec)},
			{at: 999_999 * us, n: 1, want: denied(0, 1*us, 1*us)},
			{at: 999_999 * us, key: "new", n: 0, want: ok(3, 0)},
			{at: 1 * sec, n: 2, want: ok(1, 1*sec)},
			{at: 1 * sec, key: "new", n: 2, want: ok(1, 1*sec)},
		},
	},
}

// With Aligned, windows begin at multiples of Window since the Unix epoch.
// The clock's start, 1,900,000,000s, is 40s into a minute (a multiple of
// 60s is 1,899,999,960s): 19.5s later it reads :59.5.
var fwaScenarios = []scenario{
	{
		name:   "a one-minute window at :59.5 resets half a second later",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: time.Minute, Aligned: true},
		steps: []tbStep{
			// A peek opens no window.
			{at: 19500 * ms, n: 0, want: ok(3, 0)},
			{at: 19500 * ms, n: 2, want: ok(1, 500*ms)},
			{at: 19500 * ms, n: 2, want: denied(1, 500*ms, 500*ms)},
			{at: 19500 * ms, n: 1, want: ok(0, 500*ms)},
			{at: 19_999_999 * us, n: 1, want: denied(0, 1*us, 1*us)},
			// :00 of the next minute: a new window, of a whole minute.
			{at: 20 * sec, n: 3, want: ok(0, time.Minute)},
			{at: 79_999_999 * us, n: 1, want: denied(0, 1*us, 1*us)},
			{at: 80 * sec, n: 1, want: ok(2, time.Minute)},
		},
	},
	{
		// The same sequence without Aligned: the window opens at :59.5.
		name:   "a first request at :59.5 opens a whole minute without Aligned",
		policy: ratekeeper.FixedWindow{Limit: 3, Window: time.Minute},
		steps: []tbStep{
			{at: 19500 * ms, n: 3, want: ok(0, time.Minute)},
			{at: 20 * sec, n: 1, want: denied(0, 59500*ms, 59500*ms)},
		},
	},
	{
		// The start is 1s into a window of 1.5s: windows begin at -1s,
		// 0.5s, 2s, ... A window that holds nothing any more is fresh at
		// any time in it.
		name:   "windows of 1.5s, the first cut short, and a Reset",
		policy: ratekeeper.FixedWindow{Limit: 2, Window: 1500 * ms, Aligned: true},
		steps: []tbStep{
			{n: 2, want: ok(0, 500*ms)},
			{n: 1, want: denied(0, 500*ms, 500*ms)},
			{at: 500 * ms, n: 1, want: ok(1, 1500*ms)},
			{at: 1 * sec, reset: true},
			{at: 1 * sec, n: 1, want: ok(1, 1*sec)},
			{at: 3 * sec, n: 1, want: ok(1, 500*ms)},
		},
	},
}

func (ts *suite) testFixedWindowScenarios(t *testing.T) { ts.runScenarios(t, fwScenarios) }

func (ts *suite) testAlignedFixedWindowScenarios(t *testing.T) { ts.runScenarios(t, fwaScenarios) }

// testAlignedFixedWindowOwnState checks that an aligned and an unaligned
// fixed window of the same Limit, Window and name keep apart states of a
// key.
func (ts *suite) testAlignedFixedWindowOwnState(t *testing.T) {
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		clock.Advance(19500 * ms) // :59.5
		opened := newLimiter(t, store, ratekeeper.Named("m", ratekeeper.FixedWindow{Limit: 3, Window: time.Minute}))
		aligned := newLimiter(t, store, ratekeeper.Named("m", ratekeeper.FixedWindow{Limit: 3, Window: time.Minute, Aligned: true}))
		forget(t, opened, "k")
		forget(t, aligned, "k")
		if opened.Spec().StateID() == aligned.Spec().StateID() {
			t.Fatal("an aligned and an unaligned window share a StateID")
		}
		if res, err := opened.AllowN(ctx, "k", 3); err != nil || !res.Allowed || res.ResetAfter != time.Minute {
			t.Fatalf("unaligned AllowN(3): %+v, %v; want allowed, reset in a minute", res, err)
		}
		if res, err := aligned.AllowN(ctx, "k", 3); err != nil || !res.Allowed || res.ResetAfter != 500*ms {
			t.Fatalf("aligned AllowN(3): %+v, %v; want its own state, allowed, reset in 0.5s", res, err)
		}
		clock.Advance(500 * ms)
		if res, err := aligned.Allow(ctx, "k"); err != nil || !res.Allowed || res.Remaining != 2 {
			t.Fatalf("aligned Allow at :00: %+v, %v; want a new window", res, err)
		}
		if res, err := opened.Allow(ctx, "k"); err != nil || res.Allowed {
			t.Fatalf("unaligned Allow at :00: %+v, %v; want its window still full", res, err)
		}
	})
}
