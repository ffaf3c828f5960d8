package drivertest

import (
	"testing"

	"github.com/ratekeeper/ratekeeper"
)

// The expected Results are worked out by hand in the comments, with the
// log of admitted units in brackets. A request admitted at t counts until
// exactly t + Window. A request of cost n passes when the costs in the log
// sum to at most Limit − n; RetryAfter is when enough of the oldest have
// left, ResetAfter when the newest leaves.
var swlScenarios = []scenario{
	{
		name:   "a request counts until exactly its time plus Window",
		policy: ratekeeper.SlidingWindowLog{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 1, want: ok(2, 1*sec)},
			{at: 200 * ms, n: 1, want: ok(1, 1*sec)},
			{at: 500 * ms, n: 1, want: ok(0, 1*sec)},
			// [0 200ms 500ms]: the entry at 0 leaves at 1s.
			{at: 500 * ms, n: 1, want: denied(0, 500*ms, 1*sec)},
			{at: 999_999 * us, n: 1, want: denied(0, 1*us, 500_001*us)},
			// [200ms 500ms 1s]: the next to leave is 200ms's, at 1.2s.
			{at: 1 * sec, n: 1, want: ok(0, 1*sec)},
			{at: 1 * sec, n: 1, want: denied(0, 200*ms, 1*sec)},
			{at: 1_199_999 * us, n: 1, want: denied(0, 1*us, 800_001*us)},
			{at: 1200 * ms, n: 1, want: ok(0, 1*sec)},
		},
	},
	{
		name:   "cost n counts n units, whole or not at all",
		policy: ratekeeper.SlidingWindowLog{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 1, want: ok(2, 1*sec)},
			{at: 300 * ms, n: 1, want: ok(1, 1*sec)},
			// [0 300ms]: three need both entries gone, at 1.3s; two need
			// the oldest gone, at 1s.
			{at: 600 * ms, n: 3, want: denied(1, 700*ms, 700*ms)},
			{at: 600 * ms, n: 2, want: denied(1, 400*ms, 700*ms)},
			{at: 600 * ms, peek: true, want: ok(1, 700*ms)},
			{at: 600 * ms, n: 1, want: ok(0, 1*sec)},
			// [600ms]: the entry at 300ms left at 1.3s, exactly.
			{at: 1300 * ms, n: 3, want: denied(2, 300*ms, 300*ms)},
			{at: 1300 * ms, n: 2, want: ok(0, 1*sec)},
			// [1.3s 1.3s 1.6s]: the two units of one request leave
			// together, so one request or two wait alike.
			{at: 1600 * ms, n: 1, want: ok(0, 1*sec)},
			{at: 1600 * ms, n: 1, want: denied(0, 700*ms, 1*sec)},
			{at: 1600 * ms, n: 2, want: denied(0, 700*ms, 1*sec)},
			{at: 1600 * ms, n: 3, want: denied(0, 1*sec, 1*sec)},
		},
	},
	{
		name:   "a peek consumes nothing and answers for cost 1",
		policy: ratekeeper.SlidingWindowLog{Limit: 3, Window: sec},
		steps: []tbStep{
			{peek: true, want: ok(3, 0)},
			{n: 0, want: ok(3, 0)},
			{n: 2, want: ok(1, 1*sec)},
			{at: 250 * ms, n: 0, want: ok(1, 750*ms)},
			{at: 250 * ms, peek: true, want: ok(1, 750*ms)},
			{at: 250 * ms, n: 1, want: ok(0, 1*sec)},
			// [0 0 250ms]: one request waits for the first entry at 0.
			{at: 500 * ms, n: 0, want: denied(0, 500*ms, 750*ms)},
			{at: 500 * ms, peek: true, want: denied(0, 500*ms, 750*ms)},
			// [250ms]: the peeks added nothing.
			{at: 1 * sec, n: 2, want: ok(0, 1*sec)},
		},
	},
	{
		name:   "Reset empties the log",
		policy: ratekeeper.SlidingWindowLog{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 3, want: ok(0, 1*sec)},
			{n: 1, want: denied(0, 1*sec, 1*sec)},
			{at: 400 * ms, reset: true},
			{at: 400 * ms, n: 0, want: ok(3, 0)},
			{at: 400 * ms, n: 3, want: ok(0, 1*sec)},
		},
	},
	{
		name:   "the key is fresh again exactly at ResetAfter",
		policy: ratekeeper.SlidingWindowLog{Limit: 3, Window: sec},
		steps: []tbStep{
			{n: 1, want: ok(2, 1*sec)},
			{at: 400 * ms, n: 2, want: ok(0, 1*sec)},
			// [400ms 400ms]: both leave at 1.4s.
			{at: 1_399_999 * us, n: 3, want: denied(1, 1*us, 1*us)},
			{at: 1_399_999 * us, key: "new", n: 0, want: ok(3, 0)},
			{at: 1400 * ms, n: 3, want: ok(0, 1*sec)},
			{at: 1400 * ms, key: "new", n: 3, want: ok(0, 1*sec)},
		},
	},
}

func (ts *suite) testSlidingWindowLogScenarios(t *testing.T) { ts.runScenarios(t, swlScenarios) }
