package redisstore

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// batchPolicies are one policy of every algorithm that has a batch
// script, small enough for a few requests to exhaust.
var batchPolicies = []ratekeeper.Policy{
	ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: 100 * time.Millisecond},
	ratekeeper.TokenBucket{Capacity: 3, RefillRate: 0.5, RefillInterval: 100 * time.Millisecond},
	ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 3},
	ratekeeper.FixedWindow{Limit: 3, Window: time.Second},
	ratekeeper.SlidingWindowLog{Limit: 3, Window: time.Second},
	ratekeeper.SlidingWindowCounter{Limit: 3, Window: time.Second},
	ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 10},
}

// batchSiblings are a second policy of each algorithm, of other
// parameters: in one batch beside batchPolicies' own, a second parameter
// set.
var batchSiblings = map[string]ratekeeper.Policy{
	driver.AlgorithmTokenBucket:          ratekeeper.TokenBucket{Capacity: 5, RefillRate: 2, RefillInterval: 150 * time.Millisecond},
	driver.AlgorithmGCRA:                 ratekeeper.GCRA{Rate: 20, Period: time.Second, Burst: 5},
	driver.AlgorithmFixedWindow:          ratekeeper.FixedWindow{Limit: 5, Window: 2 * time.Second},
	driver.AlgorithmSlidingWindowLog:     ratekeeper.SlidingWindowLog{Limit: 5, Window: 2 * time.Second},
	driver.AlgorithmSlidingWindowCounter: ratekeeper.SlidingWindowCounter{Limit: 5, Window: 2 * time.Second},
	driver.AlgorithmLeakyBucket:          ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 20},
}

// newCall builds the call that Decide would send.
func newCall(t *testing.T, s *Store, spec *driver.ValidSpec, key string, n int64, sent time.Time) *call {
	return newModeCall(t, s, spec, key, n, driver.Take, sent)
}

// newModeCall builds the call that Decide (Take), Charge or Refund would
// send.
func newModeCall(t *testing.T, s *Store, spec *driver.ValidSpec, key string, n int64, mode driver.Mode, sent time.Time) *call {
	t.Helper()
	alg, err := scriptOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s.call(context.Background(), alg, key, spec, n, mode, sent)
}

// TestBatchDecidesLikeSingleCalls sends rounds of requests, charges and
// refunds over a few keys, under a policy and a sibling of its algorithm
// (two parameter sets), as combined batches to one store, and one by one
// to another, on the same clocks: every Result must be the same, and each
// round one script call.
func TestBatchDecidesLikeSingleCalls(t *testing.T) {
	client := redistest.Client(t)
	for _, p := range batchPolicies {
		spec, err := testutil.SpecOf(p)
		if err != nil {
			t.Fatal(err)
		}
		sibling, err := testutil.SpecOf(batchSiblings[spec.Algorithm()], ratekeeper.WithName("sibling"))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(spec.Algorithm(), func(t *testing.T) {
			now := time.Now()
			clock := WithClock(func() time.Time { return now })
			batched := New(client, WithKeyPrefix(redistest.Prefix(t)), clock)
			single := New(client, WithKeyPrefix(redistest.Prefix(t)), clock)
			r := rand.New(rand.NewPCG(3, 4))
			keys := []string{"a", "b", "c"}
			allowed, denied, mixed := 0, 0, 0
			for round := range 40 {
				now = now.Add(time.Duration(r.IntN(150)) * time.Millisecond)
				var calls, want []*call
				for range 2 + r.IntN(6) {
					// A batch's requests may come at different times.
					now = now.Add(time.Duration(r.IntN(30)) * time.Millisecond)
					key, n := keys[r.IntN(len(keys))], int64(r.IntN(3))
					mode := [...]driver.Mode{driver.Take, driver.Take, driver.Take, driver.Charge, driver.Refund}[r.IntN(5)]
					if mode == driver.Charge {
						n = int64(r.IntN(7))
					}
					spec := spec
					if r.IntN(3) == 0 {
						spec = sibling
					}
					calls = append(calls, newModeCall(t, batched, spec, key, n, mode, now))
					want = append(want, newModeCall(t, single, spec, key, n, mode, now))
				}
				if a := batchArgs(calls); a[1] == 2 {
					mixed++
				}
				if g := groupCalls(calls, true); len(g) != 1 {
					t.Fatalf("round %d: %d calls made %d script calls, want 1", round, len(calls), len(g))
				}
				runBatch(context.Background(), client, newFunctions(client), calls, true)
				for i, c := range calls {
					want[i].run(context.Background(), client, newFunctions(client))
					if c.err != nil || want[i].err != nil {
						t.Fatalf("round %d, call %d: batched error %v, single error %v", round, i, c.err, want[i].err)
					}
					got, err1 := parseReply(c.req.parts[0].spec, c.reply)
					exp, err2 := parseReply(c.req.parts[0].spec, want[i].reply)
					if err1 != nil || err2 != nil || !reflect.DeepEqual(got, exp) {
						t.Fatalf("round %d, call %d (%s, cost %v): batched %+v (%v), single %+v (%v)",
							round, i, c.keys[0], c.req.parts[0].n, got, err1, exp, err2)
					}
					if exp.Allowed {
						allowed++
					} else {
						denied++
					}
				}
			}
			if allowed == 0 || denied == 0 || mixed == 0 {
				t.Fatalf("%d allowed, %d denied, %d rounds of both policies: a case untested", allowed, denied, mixed)
			}
		})
	}
}

// TestBatchOnServerClock: requests in one batch are decided in order at
// one time, the server's: of five requests for a bucket of three, the
// first three pass.
func TestBatchOnServerClock(t *testing.T) {
	client := redistest.Client(t)
	s := New(client, WithKeyPrefix(redistest.Prefix(t)))
	spec, _ := testutil.SpecOf(batchPolicies[0])
	var calls []*call
	for range 5 {
		calls = append(calls, newCall(t, s, spec, "k", 1, time.Time{}))
	}
	runBatch(context.Background(), client, newFunctions(client), calls, true)
	for i, c := range calls {
		res, err := parseReply(spec, c.reply)
		if c.err != nil || err != nil {
			t.Fatalf("call %d: %v, %v", i, c.err, err)
		}
		if want := i < 3; res.Allowed != want || res.Remaining != int64(max(2-i, 0))*driver.Unit {
			t.Errorf("call %d: %+v; want allowed %t", i, res, want)
		}
	}
}

// TestBatchErrorStaysPerCall: a key of another type fails its own request
// and no other in the batch, and a flushed script is loaded again.
func TestBatchErrorStaysPerCall(t *testing.T) {
	client := redistest.Client(t)
	ctx := context.Background()
	s := New(client, WithKeyPrefix(redistest.Prefix(t)))
	spec, _ := testutil.SpecOf(batchPolicies[2])
	if err := client.HSet(ctx, s.Key("foreign", spec), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var calls []*call
	for _, key := range []string{"a", "foreign", "b", "a"} {
		calls = append(calls, newCall(t, s, spec, key, 1, time.Time{}))
	}
	runBatch(context.Background(), client, newFunctions(client), calls, true)
	for i, c := range calls {
		if i == 1 {
			if c.err == nil || !strings.Contains(c.err.Error(), "WRONGTYPE") {
				t.Errorf("the request on a hash: reply %v, error %v; want WRONGTYPE", c.reply, c.err)
			}
			continue
		}
		if res, err := parseReply(spec, c.reply); c.err != nil || err != nil || !res.Allowed {
			t.Errorf("call %d: %+v, %v, %v; want allowed", i, res, c.err, err)
		}
	}
}

// TestGroupCalls: calls of one algorithm share a script call, up to
// maxCombined; an All, a lone call of its algorithm and an abandoned call
// do not; without combine every call is alone.
func TestGroupCalls(t *testing.T) {
	s := New(nil)
	gcra, _ := testutil.SpecOf(ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1})
	fw, _ := testutil.SpecOf(ratekeeper.FixedWindow{Limit: 1, Window: time.Second})
	all, _ := testutil.SpecOf(ratekeeper.All(ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1},
		ratekeeper.FixedWindow{Limit: 1, Window: time.Second}))
	var calls []*call
	for range maxCombined + 3 {
		calls = append(calls, newCall(t, s, gcra, "g", 1, time.Time{}))
	}
	calls = append(calls, newCall(t, s, fw, "f", 1, time.Time{}), newCall(t, s, all, "a", 1, time.Time{}))
	gone := newCall(t, s, gcra, "gone", 1, time.Time{})
	gone.abandoned.Store(true)
	calls = append(calls, gone)

	var sizes []int
	for _, g := range groupCalls(calls, true) {
		sizes = append(sizes, len(g.calls))
		if batch := g.script == g.calls[0].alg.batch; batch != (len(g.calls) > 1) {
			t.Errorf("a group of %d calls: batch script %t", len(g.calls), batch)
		}
		// One spec: the slack, one parameter set, four values per call.
		if len(g.calls) > 1 && len(g.args) != 2+4+len(g.calls)*4 {
			t.Errorf("a group of %d calls has %d ARGV", len(g.calls), len(g.args))
		}
	}
	slices.Sort(sizes)
	if want := []int{1, 1, 3, maxCombined}; !slices.Equal(sizes, want) {
		t.Errorf("group sizes %v, want %v", sizes, want)
	}
	if g := groupCalls(calls, false); len(g) != len(calls)-1 {
		t.Errorf("without combine: %d groups for %d calls, one abandoned", len(g), len(calls))
	}
}
