package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// multiStore is a store that decides several keys at once.
type multiStore interface {
	ratekeeper.Store
	driver.MultiDecider
}

var (
	_ multiStore = (*memstore.Store)(nil)
	_ multiStore = (*redisstore.Store)(nil)
)

// TestDecideAllEquivalence requires memstore and Redis, on one controlled
// clock, to return identical Results for random batches of 1 to 6
// requests over random policies (Alls and aligned windows among them) and
// two keys, repeats included. Each policy has keys of its own: policies
// of one algorithm and name but different limits share a key's state, and
// the stores then expire it at different times (memstore by the last
// policy that took, Redis an hour after: keySkew). Requests take, charge
// (some more than their policy admits at once), refund, or take
// with ChargeOver. Batches that allow, that deny, and that hold a key's
// state twice must all occur, as must debts, refunds, charges of a
// ChargeOver and peeks denied by a debt, so that the comparison is not
// vacuous.
func TestDecideAllEquivalence(t *testing.T) {
	run := seeds
	if testing.Short() {
		run = seeds[:1] // make test; make soak runs them all
	}
	for _, seed := range run {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			clock := newClock()
			mem := newMemstore(t, clock.Now).(multiStore)
			red := newRedisstore(t, clock.Now).(multiStore)
			specs := make([]*driver.ValidSpec, len(policies))
			for i, pc := range policies {
				specs[i] = mustSpec(t, pc.policy)
			}
			keys := []string{"a", "b"}
			t.Cleanup(func() {
				for _, k := range keys {
					for p, spec := range specs {
						red.Reset(context.Background(), fmt.Sprint(k, p), spec)
					}
				}
			})
			r := rand.New(rand.NewPCG(seed, 7))
			var allowed, denied, shared, debts, refunds, overs, peeksInDebt int
			for step := range 3000 {
				clock.Advance(time.Duration(r.Int64N(int64(300*time.Millisecond/time.Microsecond)+1)) * time.Microsecond)
				reqs := make([]driver.Request, 1+r.IntN(6))
				seen := map[string]bool{}
				isShared := false
				for i := range reqs {
					p := r.IntN(len(specs))
					spec := specs[p]
					n := int64(0)
					if r.IntN(8) > 0 {
						n = 1 + r.Int64N(min(spec.MaxCost(), 3))
					}
					reqs[i] = driver.Request{Key: fmt.Sprint(keys[r.IntN(len(keys))], p), Spec: spec, N: n}
					switch k := r.IntN(10); {
					case n == 0:
					case k < 2:
						reqs[i].Mode = driver.Charge
						if r.IntN(4) == 0 {
							reqs[i].N = spec.MaxCost() + 1 + r.Int64N(3) // more than fits at once
						}
					case k < 3:
						reqs[i].Mode = driver.Refund
						refunds++
					case k < 4:
						reqs[i].ChargeOver = true
					}
					for _, p := range spec.Policies() {
						id := reqs[i].Key + "/" + p.Algorithm() + "/" + p.StateID().String()
						isShared = isShared || seen[id]
						seen[id] = true
					}
				}
				want, err := resultsOf(t, mem, reqs)
				if err != nil {
					t.Fatalf("step %d: memstore: %v", step, err)
				}
				got, err := resultsOf(t, red, reqs)
				if err != nil {
					t.Fatalf("step %d: redis: %v", step, err)
				}
				all := true
				for i := range reqs {
					if d := testutil.DiffResult(got[i], want[i]); d != "" {
						t.Fatalf("step %d at start+%v, request %d of %s:\nmemstore %+v\nredis    %+v",
							step, clock.Elapsed(), i, describe(reqs), want[i], got[i])
					}
					switch {
					case reqs[i].N == 0 && want[i].Remaining < 0:
						peeksInDebt++
					case want[i].Remaining < 0:
						debts++
					}
					if reqs[i].ChargeOver && !want[i].Allowed {
						overs++
					}
					all = all && (want[i].Allowed || reqs[i].Mode == driver.Refund)
				}
				if all {
					allowed++
				} else {
					denied++
				}
				if isShared {
					shared++
				}
			}
			t.Logf("%d batches allowed, %d denied, %d sharing a state; %d debts, %d refunds, %d ChargeOver denied, %d peeks in debt",
				allowed, denied, shared, debts, refunds, overs, peeksInDebt)
			if allowed < 100 || denied < 100 || shared < 100 || debts < 100 || refunds < 100 || overs < 100 || peeksInDebt < 20 {
				t.Fatalf("%d batches allowed, %d denied, %d sharing a state; %d debts, %d refunds, %d ChargeOver denied, %d peeks in debt: want at least 100 of each (20 peeks)",
					allowed, denied, shared, debts, refunds, overs, peeksInDebt)
			}
		})
	}
}

// describe lists requests for a failure message.
func describe(reqs []driver.Request) string {
	var b strings.Builder
	for i, r := range reqs {
		fmt.Fprintf(&b, "\n  %d: %q %s %+v n=%d %s over=%t", i, r.Key, r.Spec.Name(), r.Spec.Spec().Params, r.N, r.Act(), r.ChargeOver)
	}
	return b.String()
}

// TestDecideAllSharedKey checks the decision of a batch that holds one
// key's state twice: the second request sees what the first would take.
func TestDecideAllSharedKey(t *testing.T) {
	forEachMultiStore(t, func(t *testing.T, clock *testutil.Clock, store multiStore) {
		ctx := context.Background()
		fw := mustSpec(t, ratekeeper.FixedWindow{Limit: 5, Window: time.Hour})
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 5, Window: time.Hour})
		forget(t, lim, "k")
		// 3 and 3 do not fit in 5: nothing is taken. The first reports the
		// state as it is, the second the state after the first.
		res, err := resultsOf(t, store, []driver.Request{{Key: "k", Spec: fw, N: 3}, {Key: "k", Spec: fw, N: 3}})
		if err != nil {
			t.Fatal(err)
		}
		wantRes := []ratekeeper.Result{
			{Policy: "fixed_window", Allowed: true, Limit: 5, Remaining: 5},
			{Policy: "fixed_window", Limit: 5, Remaining: 2, RetryAfter: time.Hour, ResetAfter: time.Hour},
		}
		checkResults(t, "3 and 3", res, wantRes)
		if got, _ := lim.Peek(ctx, "k"); got.Remaining != 5 {
			t.Fatalf("after a denied batch: %+v, want nothing taken", got)
		}
		// 2 and 3 fit: both take.
		res, err = resultsOf(t, store, []driver.Request{{Key: "k", Spec: fw, N: 2}, {Key: "k", Spec: fw, N: 3}})
		if err != nil {
			t.Fatal(err)
		}
		wantRes = []ratekeeper.Result{
			{Policy: "fixed_window", Allowed: true, Limit: 5, Remaining: 3, ResetAfter: time.Hour},
			{Policy: "fixed_window", Allowed: true, Limit: 5, Remaining: 0, ResetAfter: time.Hour},
		}
		checkResults(t, "2 and 3", res, wantRes)
		if got, _ := lim.Peek(ctx, "k"); got.Remaining != 0 {
			t.Fatalf("after an allowed batch: %+v, want 5 taken", got)
		}
	})
}

func checkResults(t *testing.T, what string, got, want []ratekeeper.Result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := testutil.DiffResult(got[i], want[i]); d != "" {
			t.Fatalf("%s, request %d:\ngot  %+v\nwant %+v", what, i, got[i], want[i])
		}
	}
}

// forEachMultiStore runs f on every store; on the cluster, keys "k", "a",
// "b" and "c" are decided in one slot only by their own calls, so tests
// that need one slot use sameSlotKeys.
func forEachMultiStore(t *testing.T, f func(t *testing.T, clock *testutil.Clock, store multiStore)) {
	forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		f(t, clock, store.(multiStore))
	})
}

// sameSlotKeys returns n caller keys whose Redis keys share a hash slot of
// the test cluster, or "x0" to "x<n-1>" when client is nil.
func sameSlotKeys(t *testing.T, client *redis.ClusterClient, n int) []string {
	var keys []string
	if client == nil {
		for i := range n {
			keys = append(keys, fmt.Sprint("x", i))
		}
		return keys
	}
	ctx := context.Background()
	bySlot := map[int64][]string{}
	for batch := 0; batch < 20; batch++ {
		cmds := make([]*redis.IntCmd, 2000)
		pipe := client.Pipeline()
		for i := range cmds {
			cmds[i] = pipe.ClusterKeySlot(ctx, fmt.Sprintf("{x%d}", batch*len(cmds)+i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			slot := cmd.Val()
			bySlot[slot] = append(bySlot[slot], fmt.Sprintf("x%d", batch*len(cmds)+i))
			if len(bySlot[slot]) == n {
				return bySlot[slot]
			}
		}
	}
	t.Fatalf("no %d keys in one slot", n)
	return nil
}

// TestDecideAllAllOrNothing races 32 goroutines, each making DecideAlls of
// one request on each of three keys, one of which admits only 10: exactly
// 10 batches are allowed in all, and each key took exactly their cost,
// on every store (on the cluster, with three keys of one slot).
func TestDecideAllAllOrNothing(t *testing.T) {
	const (
		goroutines = 32
		calls      = 5
	)
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			clock := newClock()
			store := sf.new(t, clock.Now).(multiStore)
			var cluster *redis.ClusterClient
			if sf.name == "redis-cluster" {
				cluster = redistest.ClusterClient(t)
			}
			keys := sameSlotKeys(t, cluster, 3)
			ctx := context.Background()
			big := ratekeeper.FixedWindow{Limit: 1000, Window: time.Hour}
			small := ratekeeper.Named("small", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 10})
			bigLim, smallLim := newLimiter(t, store, big), newLimiter(t, store, small)
			forget(t, bigLim, keys...)
			forget(t, smallLim, keys...)
			reqs := []driver.Request{
				{Key: keys[0], Spec: bigLim.Spec(), N: 1},
				{Key: keys[1], Spec: bigLim.Spec(), N: 2},
				{Key: keys[2], Spec: smallLim.Spec(), N: 1},
			}
			var mu sync.Mutex
			var allowed, denied int
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range calls {
						res, err := resultsOf(t, store, reqs)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if res[0].Allowed && res[1].Allowed && res[2].Allowed {
							allowed++
						} else {
							denied++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if allowed != 10 || denied != goroutines*calls-10 {
				t.Fatalf("%d batches allowed and %d denied, want 10 and %d", allowed, denied, goroutines*calls-10)
			}
			for i, want := range []float64{1000 - 10, 1000 - 20} {
				if res, err := bigLim.Peek(ctx, keys[i]); err != nil || res.Remaining != want {
					t.Errorf("key %d: %+v, %v; want %v remaining", i, res, err, want)
				}
			}
			if res, err := smallLim.Peek(ctx, keys[2]); err != nil || res.Allowed {
				t.Errorf("the small key: %+v, %v; want it exhausted", res, err)
			}
		})
	}
}

// TestDecideAllErrors checks DecideAll's validation on every store: any
// invalid request fails the whole call with Decide's errors, and takes
// nothing.
func TestDecideAllErrors(t *testing.T) {
	forEachMultiStore(t, func(t *testing.T, clock *testutil.Clock, store multiStore) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 3, Window: time.Hour})
		forget(t, lim, "k")
		spec := lim.Spec()
		ok := driver.Request{Key: "k", Spec: spec, N: 1}
		if res, err := store.DecideAll(ctx, nil); res != nil || err != nil {
			t.Errorf("no request: %v, %v; want nil, nil", res, err)
		}
		for _, c := range []struct {
			name string
			req  driver.Request
			want error
		}{
			{"an empty key", driver.Request{Key: "", Spec: spec, N: 1}, ratekeeper.ErrInvalidKey},
			{"a long key", driver.Request{Key: strings.Repeat("x", ratekeeper.MaxKeyLen+1), Spec: spec, N: 1}, ratekeeper.ErrInvalidKey},
			{"a negative cost", driver.Request{Key: "k", Spec: spec, N: -1}, ratekeeper.ErrInvalidCost},
			{"a cost too high", driver.Request{Key: "k", Spec: spec, N: 4}, ratekeeper.ErrInvalidCost},
			{"a nil spec", driver.Request{Key: "k", N: 1}, ratekeeper.ErrInvalidPolicy},
			{"a zero spec", driver.Request{Key: "k", Spec: &driver.ValidSpec{}, N: 1}, ratekeeper.ErrInvalidPolicy},
		} {
			if _, err := store.DecideAll(ctx, []driver.Request{ok, c.req}); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want an error matching %v", c.name, err, c.want)
			}
		}
		many := make([]driver.Request, driver.MaxRequests+1)
		for i := range many {
			many[i] = ok
		}
		if _, err := store.DecideAll(ctx, many); !errors.Is(err, driver.ErrTooManyRequests) {
			t.Errorf("%d requests: %v, want ErrTooManyRequests", len(many), err)
		}
		all := newLimiter(t, store, ratekeeper.All(
			ratekeeper.Named("a", ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}),
			ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}),
			ratekeeper.Named("c", ratekeeper.FixedWindow{Limit: 3, Window: time.Hour})))
		parts := make([]driver.Request, driver.MaxRequestPolicies/3+1)
		for i := range parts {
			parts[i] = driver.Request{Key: "k", Spec: all.Spec(), N: 1}
		}
		if _, err := store.DecideAll(ctx, parts); !errors.Is(err, driver.ErrTooManyRequests) {
			t.Errorf("%d policies: %v, want ErrTooManyRequests", 3*len(parts), err)
		}
		if res, err := lim.Peek(ctx, "k"); err != nil || res.Remaining != 3 {
			t.Errorf("after the errors: %+v, %v; want nothing taken", res, err)
		}
		if res, err := resultsOf(t, store, []driver.Request{ok, ok}); err != nil || !res[1].Allowed || res[1].Remaining != 1 {
			t.Errorf("two valid requests: %+v, %v; want both allowed", res, err)
		}
	})
}

// TestDecideAllAlignedAndAll decides an All and an aligned window of two
// keys together, on every store: at :59.5 the aligned window resets half
// a second later; a denial by one part of the All takes nothing from the
// other key.
func TestDecideAllAlignedAndAll(t *testing.T) {
	forEachMultiStore(t, func(t *testing.T, clock *testutil.Clock, store multiStore) {
		ctx := context.Background()
		var cluster *redis.ClusterClient
		if _, ok := store.(*redisstore.Store); ok && strings.HasSuffix(t.Name(), "redis-cluster") {
			cluster = redistest.ClusterClient(t)
		}
		keys := sameSlotKeys(t, cluster, 2)
		clock.Advance(19500 * ms) // :59.5
		minute := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 2, Window: time.Minute, Aligned: true})
		both := newLimiter(t, store, ratekeeper.All(
			ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Second}),
			ratekeeper.Named("hour", ratekeeper.FixedWindow{Limit: 4, Window: time.Hour})))
		forget(t, minute, keys...)
		forget(t, both, keys...)
		reqs := func(n0, n1 int64) []driver.Request {
			return []driver.Request{{Key: keys[0], Spec: minute.Spec(), N: n0}, {Key: keys[1], Spec: both.Spec(), N: n1}}
		}
		res, err := resultsOf(t, store, reqs(1, 3))
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || res[0].ResetAfter != 500*ms || res[0].Remaining != 1 || !res[1].Allowed || len(res[1].Parts) != 2 || res[1].Parts[1].Remaining != 1 {
			t.Fatalf("first batch: %+v", res)
		}
		// The bucket is empty: the batch is denied, and the window keeps
		// its one remaining.
		res, err = resultsOf(t, store, reqs(1, 1))
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Allowed || res[0].Remaining != 1 || res[1].Allowed || res[1].Policy != "burst" {
			t.Fatalf("second batch: %+v", res)
		}
		clock.Advance(500 * ms) // :00, and half a refill interval
		if res, err := minute.Peek(ctx, keys[0]); err != nil || res.Remaining != 2 {
			t.Fatalf("the aligned window at :00: %+v, %v; want a new window", res, err)
		}
	})
}

func TestDecideAllPeekNeverDenies(t *testing.T) {
	for _, sf := range stores {
		t.Run(sf.name, func(t *testing.T) {
			store := sf.new(t, newClock().Now).(multiStore)
			var cluster *redis.ClusterClient
			if sf.name == "redis-cluster" {
				cluster = redistest.ClusterClient(t)
			}
			keys := sameSlotKeys(t, cluster, 2)
			ctx := context.Background()
			fw := mustSpec(t, ratekeeper.FixedWindow{Limit: 1, Window: time.Hour})
			lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 1, Window: time.Hour})
			forget(t, lim, keys...)
			if _, err := lim.Allow(ctx, keys[0]); err != nil {
				t.Fatal(err)
			}
			// keys[0] is exhausted; a peek at it takes nothing, so needs
			// nothing, and keys[1]'s request still takes.
			res, err := resultsOf(t, store, []driver.Request{{Key: keys[0], Spec: fw, N: 0}, {Key: keys[1], Spec: fw, N: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Allowed || !res[1].Allowed {
				t.Fatalf("results %+v", res)
			}
			if got, _ := lim.Peek(ctx, keys[1]); got.Remaining != 0 {
				t.Fatalf("%s: %+v, want its request taken beside a peek", keys[1], got)
			}
		})
	}
}

// resultsOf is store.DecideAll, its Decisions made Results as a Limiter
// makes them.
func resultsOf(t testing.TB, store driver.MultiDecider, reqs []driver.Request) ([]ratekeeper.Result, error) {
	t.Helper()
	ds, err := store.DecideAll(context.Background(), reqs)
	if err != nil {
		return nil, err
	}
	if len(ds) != len(reqs) {
		t.Fatalf("DecideAll of %d requests: %d Decisions", len(reqs), len(ds))
	}
	res := make([]ratekeeper.Result, len(ds))
	for i, d := range ds {
		if res[i], err = testutil.ResultOf(reqs[i].Spec, d); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return res, nil
}
