package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// The expected Results are worked out by hand in the comments. Windows
// are aligned to multiples of Window since the Unix epoch. With a Window
// of 3s, the clock's start, 1,900,000,000s = 633,333,333·3s + 1s, lies 1s
// into a window: windows begin at -1s, 2s, 5s, ... from the start. At
// offset r into a window, a request of cost n passes when
// ⌈prev·(3s−r)/3s⌉ + curr + n <= Limit, prev and curr the counts of the
// previous and current windows. Remaining is Limit − curr − that weight;
// ResetAfter is the end of the window after the last request's.
var swcScenarios = []scenario{
	{
		name:   "windows aligned to the epoch; RetryAfter in the next window and later in the same",
		policy: ratekeeper.SlidingWindowCounter{Limit: 4, Window: 3 * sec},
		steps: []tbStep{
			// Window [-1s, 2s): the key is fresh again at 5s.
			{n: 1, want: ok(3, 5*sec)},
			{n: 3, want: ok(0, 5*sec)},
			// No room left in this window. In the next, prev is 4: one
			// request fits once ⌈4·(3s−r)/3s⌉ <= 3, at r = 0.75s, so
			// at 2.75s.
			{n: 1, want: denied(0, 2750*ms, 5*sec)},
			{n: 0, want: denied(0, 2750*ms, 5*sec)},
			// Still the first window 1µs before 2s.
			{at: 1_999_999 * us, n: 1, want: denied(0, 750_001*us, 3_000_001*us)},
			// Window [2s, 5s): prev 4, curr 0. At r = 0.749999s the weight
			// is ⌈3.0000013⌉ = 4; fresh again at 5s once this window
			// holds nothing.
			{at: 2_749_999 * us, n: 1, want: denied(0, 1*us, 2_250_001*us)},
			// r = 0.75s: weight 3, curr 1. Fresh at 8s now.
			{at: 2750 * ms, n: 1, want: ok(0, 5250*ms)},
			// The same window has room again once ⌈4·(3s−r)/3s⌉ <= 2, at
			// r = 1.5s: 3.5s.
			{at: 2750 * ms, n: 1, want: denied(0, 750*ms, 5250*ms)},
			// r = 2s: weight ⌈1.33⌉ = 2, so 4 − 1 − 2 = 1 remains.
			{at: 4 * sec, n: 0, want: ok(1, 4*sec)},
		},
	},
	{
		name:   "a cost is taken whole or not at all",
		policy: ratekeeper.SlidingWindowCounter{Limit: 4, Window: 3 * sec},
		steps: []tbStep{
			{n: 3, want: ok(1, 5*sec)},
			// Two fit in the next window once ⌈3·(3s−r)/3s⌉ <= 2, at
			// r = 1s: 2s + 1s.
			{n: 2, want: denied(1, 3*sec, 5*sec)},
			{peek: true, want: ok(1, 5*sec)},
			{n: 1, want: ok(0, 5*sec)},
			// Window [2s, 5s), r = 1s: weight ⌈2.67⌉ = 3. Two fit once
			// ⌈4·(3s−r)/3s⌉ <= 2, at r = 1.5s; fresh at 5s.
			{at: 3 * sec, n: 2, want: denied(1, 500*ms, 2*sec)},
			{at: 3 * sec, peek: true, want: ok(1, 2*sec)},
			{at: 3500 * ms, n: 2, want: ok(0, 4500*ms)},
		},
	},
	{
		name:   "a peek consumes nothing and answers for cost 1",
		policy: ratekeeper.SlidingWindowCounter{Limit: 4, Window: 3 * sec},
		steps: []tbStep{
			{peek: true, want: ok(4, 0)},
			{n: 0, want: ok(4, 0)},
			{n: 3, want: ok(1, 5*sec)},
			{n: 0, want: ok(1, 5*sec)},
			{peek: true, want: ok(1, 5*sec)},
			{n: 1, want: ok(0, 5*sec)},
			{n: 0, want: denied(0, 2750*ms, 5*sec)},
			{peek: true, want: denied(0, 2750*ms, 5*sec)},
			// The peeks counted nothing: prev is 4, as above.
			{at: 2750 * ms, n: 1, want: ok(0, 5250*ms)},
		},
	},
	{
		name:   "Reset forgets both windows",
		policy: ratekeeper.SlidingWindowCounter{Limit: 4, Window: 3 * sec},
		steps: []tbStep{
			{n: 4, want: ok(0, 5*sec)},
			{n: 1, want: denied(0, 2750*ms, 5*sec)},
			// Window [2s, 5s): prev 4 weighs 4 at r = 0.
			{at: 2 * sec, n: 0, want: denied(0, 750*ms, 3*sec)},
			{at: 2 * sec, reset: true},
			{at: 2 * sec, n: 0, want: ok(4, 0)},
			{at: 2 * sec, n: 4, want: ok(0, 6*sec)},
		},
	},
	{
		name:   "the key is fresh again exactly at ResetAfter",
		policy: ratekeeper.SlidingWindowCounter{Limit: 4, Window: 3 * sec},
		steps: []tbStep{
			{n: 1, want: ok(3, 5*sec)},
			// Window [2s, 5s), r = 2.999999s: prev 1 still weighs
			// ⌈1µs/3s⌉ = 1, so four wait for the next window.
			{at: 4_999_999 * us, n: 4, want: denied(3, 1*us, 1*us)},
			{at: 4_999_999 * us, key: "new", n: 0, want: ok(4, 0)},
			// Window [5s, 8s): the one at 0 is two windows back.
			{at: 5 * sec, n: 4, want: ok(0, 6*sec)},
			{at: 5 * sec, key: "new", n: 4, want: ok(0, 6*sec)},
		},
	},
}

func (ts *suite) testSlidingWindowCounterScenarios(t *testing.T) { ts.runScenarios(t, swcScenarios) }

// testSlidingWindowCounterBoundaryBurst replays the boundary-burst trace:
// Limit requests in the last microsecond of a window, then one every
// 100 ms for two windows. The counter assumes the burst was spread over
// its window, so it lets the next window's requests in as the burst's
// weight fades, while the burst is still inside the rolling window: 199
// in one rolling minute, 1.99 times the Limit of 100, as docs/algorithms.md
// states. (It can never reach 2×Limit: the burst weighs at least 1 until
// the rolling window leaves it.)
func (ts *suite) testSlidingWindowCounterBoundaryBurst(t *testing.T) {
	const limit, window = 100, time.Minute
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.SlidingWindowCounter{Limit: limit, Window: window})
		forget(t, lim, "k")
		// To the last microsecond of the window (aligned to the epoch).
		clock.Advance(window - time.Duration(clock.Now().UnixMicro())*time.Microsecond%window - us)
		var admitted []time.Time
		allow := func() {
			res, err := lim.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted = append(admitted, clock.Now())
			}
		}
		for range limit {
			allow()
		}
		for range 2 * window / (100 * time.Millisecond) {
			clock.Advance(100 * time.Millisecond)
			allow()
		}
		// The most admitted in any rolling window (t − window, t].
		most, from := 0, 0
		for i, at := range admitted {
			for !admitted[from].After(at.Add(-window)) {
				from++
			}
			most = max(most, i-from+1)
		}
		if most != 2*limit-1 {
			t.Errorf("%d admitted in the busiest rolling window, want %d", most, 2*limit-1)
		}
		t.Logf("%d of %d admitted; %d (%.2f× the limit) in the busiest rolling window", len(admitted), limit+1200, most, float64(most)/limit)
	})
}
