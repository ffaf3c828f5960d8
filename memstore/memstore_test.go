package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// newClock returns a controlled clock for memstore.WithClock.
func newClock() *testutil.Clock {
	return testutil.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// policies holds one policy per algorithm, each admitting 3 requests at
// once.
var policies = []ratekeeper.Policy{
	ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: time.Second},
	ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 3},
	ratekeeper.FixedWindow{Limit: 3, Window: time.Second},
	ratekeeper.SlidingWindowLog{Limit: 3, Window: time.Second},
	ratekeeper.SlidingWindowCounter{Limit: 3, Window: time.Second},
	ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 1},
}

// newStore returns a store without a background sweep unless opts ask for
// one, closed when t ends.
func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	s := memstore.New(append([]memstore.Option{memstore.WithSweepInterval(0)}, opts...)...)
	t.Cleanup(func() { s.Close() })
	return s
}

func newLimiter(t testing.TB, s *memstore.Store, p ratekeeper.Policy) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestMaxKeys(t *testing.T) {
	s := newStore(t, memstore.WithMaxKeys(1000))
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Hour})
	ctx := context.Background()

	for i := range 100_000 {
		key := fmt.Sprint("k", i)
		res, err := lim.Allow(ctx, key)
		testutil.WantResult(t, "Allow on "+key, res, err, true, 4)
		if i%10 == 0 {
			// The key just added kept its state.
			res, err = lim.Allow(ctx, key)
			testutil.WantResult(t, "second Allow on "+key, res, err, true, 3)
		}
	}
	if s.MaxKeys() < 1000 {
		t.Errorf("MaxKeys() = %d, below the 1000 asked for", s.MaxKeys())
	}
	if s.Len() > s.MaxKeys() {
		t.Errorf("Len() = %d, above MaxKeys() = %d", s.Len(), s.MaxKeys())
	}
	if s.Evictions() == 0 {
		t.Error("Evictions() = 0 after 100,000 keys")
	}
}

// With 16 keys the store samples all of them, so it always
// evicts the key whose state would be full first. That key is neither the
// oldest nor the least recently used one here.
func TestEvictsKeyFullFirst(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.WithMaxKeys(16), memstore.WithClock(clock.Now))
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Second})
	ctx := context.Background()

	// Key i is the i-th seen and takes 16-i tokens: the last key seen is
	// full again first.
	for i := range 16 {
		res, err := lim.AllowN(ctx, fmt.Sprint("k", i), int64(16-i))
		testutil.WantResult(t, fmt.Sprint("AllowN on k", i), res, err, true, float64(100-16+i))
		clock.Advance(time.Millisecond)
	}
	for i := range 16 {
		// New keys take so much that they are full again last.
		res, err := lim.AllowN(ctx, fmt.Sprint("new", i), 100)
		testutil.WantResult(t, fmt.Sprint("AllowN on new", i), res, err, true, 0)
		if s.Len() != 16 || s.Evictions() != int64(i+1) {
			t.Fatalf("after %d new keys: Len() = %d, Evictions() = %d; want 16, %d", i+1, s.Len(), s.Evictions(), i+1)
		}
		// k15, taking 1 token, goes first; then k14, and so on.
		for j := range 16 {
			res, err := lim.Peek(ctx, fmt.Sprint("k", j))
			evicted := j >= 15-i
			want := float64(100 - 16 + j)
			if evicted {
				want = 100
			}
			testutil.WantResult(t, fmt.Sprintf("after %d new keys, Peek on k%d", i+1, j), res, err, true, want)
		}
	}
}

func TestEvictsExpiredBeforeLive(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.WithMaxKeys(16), memstore.WithClock(clock.Now))
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Second})
	ctx := context.Background()

	// Key i takes i+1 tokens, so it is full again after i+1 seconds.
	for i := range 16 {
		res, err := lim.AllowN(ctx, fmt.Sprint("k", i), int64(i+1))
		testutil.WantResult(t, fmt.Sprint("AllowN on k", i), res, err, true, float64(99-i))
	}
	// k0, k1 and k2 expire; refills leave the others 3 tokens richer.
	clock.Advance(3 * time.Second)
	for i := range 3 {
		res, err := lim.Allow(ctx, fmt.Sprint("new", i))
		testutil.WantResult(t, fmt.Sprint("Allow on new", i), res, err, true, 99)
	}
	if s.Len() != 16 {
		t.Errorf("Len() = %d, want 16", s.Len())
	}
	for i := 3; i < 16; i++ {
		res, err := lim.Peek(ctx, fmt.Sprint("k", i))
		testutil.WantResult(t, fmt.Sprint("Peek on live key k", i), res, err, true, float64(99-i+3))
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	for _, p := range policies {
		clock := newClock()
		s := newStore(t, memstore.WithClock(clock.Now))
		lim := newLimiter(t, s, p)
		alg := lim.Spec().Algorithm()

		var res ratekeeper.Result
		for i := range 100 {
			var err error
			res, err = lim.AllowN(ctx, fmt.Sprint("k", i), 2)
			testutil.WantResult(t, alg+": AllowN(2)", res, err, true, 1)
		}

		clock.Advance(res.ResetAfter - time.Microsecond)
		s.Sweep()
		if s.Len() != 100 {
			t.Fatalf("%s: Len() = %d after a sweep 1µs before the keys are full again, want 100", alg, s.Len())
		}
		clock.Advance(time.Microsecond)
		s.Sweep()
		if s.Len() != 0 {
			t.Fatalf("%s: Len() = %d after a sweep once the keys are full again, want 0", alg, s.Len())
		}

		// A swept key decides as one never seen.
		fresh := newLimiter(t, newStore(t, memstore.WithClock(clock.Now)), p)
		for _, n := range []int64{0, 3, 1} {
			got, err := lim.AllowN(ctx, "k0", n)
			want, _ := fresh.AllowN(ctx, "k0", n)
			if err != nil || testutil.DiffResult(got, want) != "" {
				t.Fatalf("%s: AllowN(%d) on a swept key = %+v, %v; a fresh key gets %+v", alg, n, got, err, want)
			}
		}
	}
}

func TestBackgroundSweep(t *testing.T) {
	s := newStore(t, memstore.WithSweepInterval(10*time.Millisecond))
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Millisecond})
	ctx := context.Background()
	for i := range 100 {
		res, err := lim.Allow(ctx, fmt.Sprint("k", i))
		testutil.WantResult(t, "Allow", res, err, true, 0)
	}
	if !eventually(func() bool { return s.Len() == 0 }) {
		t.Errorf("Len() = %d: the background sweep did not free expired keys", s.Len())
	}
}

func TestClose(t *testing.T) {
	before := settledGoroutines()
	s := memstore.New(memstore.WithSweepInterval(time.Millisecond))
	if n := runtime.NumGoroutine(); n != before+1 {
		t.Errorf("NumGoroutine() = %d with a background sweep, want %d", n, before+1)
	}
	closeWithin(t, s)
	if !eventually(func() bool { return runtime.NumGoroutine() <= before }) {
		t.Errorf("NumGoroutine() = %d after Close, want %d", runtime.NumGoroutine(), before)
	}
	closeWithin(t, s)

	// The store stays usable, and nothing sweeps it any more.
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Microsecond})
	res, err := lim.Allow(context.Background(), "k")
	testutil.WantResult(t, "Allow after Close", res, err, true, 0)
	time.Sleep(20 * time.Millisecond)
	if s.Len() != 1 {
		t.Errorf("Len() = %d: a sweep ran after Close", s.Len())
	}
}

func closeWithin(t *testing.T, s *memstore.Store) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked")
	}
}

func TestNoSweep(t *testing.T) {
	before := settledGoroutines()
	s := memstore.New(memstore.WithSweepInterval(0))
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("NumGoroutine() = %d with WithSweepInterval(0), want %d", n, before)
	}
	closeWithin(t, s)
}

// settledGoroutines returns the number of goroutines once it holds still,
// so that those of earlier tests that are still ending do not count.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(5 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			break
		}
		n = m
	}
	return n
}

// eventually polls cond for up to five seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestZeroAllocs(t *testing.T) {
	ctx := context.Background()
	// Limits that keep allowing for the whole run. The sliding window log
	// is left out: its log grows with every request it admits.
	large := []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: 1e6, RefillInterval: time.Hour},
		ratekeeper.GCRA{Rate: 1, Period: time.Microsecond, Burst: 1e6},
		ratekeeper.FixedWindow{Limit: ratekeeper.MaxLimit, Window: time.Hour},
		ratekeeper.SlidingWindowCounter{Limit: ratekeeper.MaxLimit, Window: time.Hour},
		ratekeeper.LeakyBucket{Capacity: ratekeeper.MaxLeakyCapacity, LeakRate: 1},
	}
	for _, p := range large {
		lim := newLimiter(t, newStore(t), p)
		alg := lim.Spec().Algorithm()
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
				t.Fatalf("%s: Allow = %+v, %v", alg, res, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: Allow on an existing key: %v allocations, want 0", alg, allocs)
		}
	}

	for _, p := range policies {
		lim := newLimiter(t, newStore(t), p)
		alg := lim.Spec().Algorithm()
		if res, err := lim.AllowN(ctx, "k", 3); err != nil || !res.Allowed {
			t.Fatalf("%s: AllowN(3) = %+v, %v", alg, res, err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
				t.Fatalf("%s: Allow on an empty key = %+v, %v", alg, res, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: denied Allow: %v allocations, want 0", alg, allocs)
		}
	}
}

// One key used under policies of different algorithms keeps a state for
// each, and counts as one key. Resetting it under one policy leaves the
// others' states be.
func TestAlgorithmsKeepSeparateState(t *testing.T) {
	s := newStore(t, memstore.WithClock(newClock().Now)) // nothing refills
	ctx := context.Background()
	var lims []*ratekeeper.Limiter
	algorithms := map[string]bool{}
	for _, p := range policies {
		lim := newLimiter(t, s, p)
		lims = append(lims, lim)
		algorithms[lim.Spec().Algorithm()] = true
	}
	if len(algorithms) != len(policies) {
		t.Fatalf("%d policies of only %d algorithms", len(policies), len(algorithms))
	}
	for i, lim := range lims {
		alg := lim.Spec().Algorithm()
		res, err := lim.AllowN(ctx, "k", 3)
		testutil.WantResult(t, alg+": AllowN(3)", res, err, true, 0)
		// The algorithms not used yet still see a fresh key.
		for _, other := range lims[i+1:] {
			res, err := other.Peek(ctx, "k")
			testutil.WantResult(t, fmt.Sprintf("%s: Peek after %s took all", other.Spec().Algorithm(), alg), res, err, true, 3)
		}
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d, want 1: one key, whatever its policies", s.Len())
	}
	// The first policy used, then the last, then the others.
	order := append([]*ratekeeper.Limiter{lims[0], lims[len(lims)-1]}, lims[1:len(lims)-1]...)
	for i, lim := range order {
		if err := lim.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		for j, other := range order {
			res, err := other.Peek(ctx, "k")
			what := fmt.Sprintf("%s: Peek after %d resets", other.Spec().Algorithm(), i+1)
			if j <= i {
				testutil.WantResult(t, what, res, err, true, 3)
			} else {
				testutil.WantResult(t, what, res, err, false, 0)
			}
		}
		if want := min(1, len(order)-1-i); s.Len() != want {
			t.Errorf("Len() = %d after %d resets, want %d", s.Len(), i+1, want)
		}
	}
}

// Deciders on one key, run while other keys come and go (inserted,
// evicted, reset and swept, in the map that decisions read without a
// lock), still admit exactly its limit.
func TestChurnKeepsKeyExact(t *testing.T) {
	const limit, workers = 20_000, 8
	s := newStore(t, memstore.WithMaxKeys(2048))
	hot := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: limit, RefillRate: 1, RefillInterval: time.Hour})
	// Keys full again 10ms after their request, far sooner than hot: they
	// fill the store, and are evicted or swept, never hot.
	churn := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: 10 * time.Millisecond})
	ctx := context.Background()

	var admitted atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	sweeper := make(chan struct{})
	go func() {
		defer close(sweeper)
		for {
			select {
			case <-done:
				return
			default:
				s.Sweep()
				if n := s.Len(); n > s.MaxKeys() {
					t.Errorf("Len() = %d, above MaxKeys() = %d", n, s.MaxKeys())
				}
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				res, err := hot.Allow(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					return
				}
				admitted.Add(1)
				key := fmt.Sprint("churn", w, "-", i)
				if _, err := churn.Allow(ctx, key); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := churn.Reset(ctx, key); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	<-sweeper
	if n := admitted.Load(); n != limit {
		t.Errorf("admitted %d requests on a key limited to %d", n, limit)
	}
}

// Decide rejects a cost out of range, which no Limiter passes on, rather
// than panic, or run the model on it and corrupt the key's state.
func TestDecideRejectsInvalidCost(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, p := range append(policies, ratekeeper.All(policies...)) {
		lim := newLimiter(t, s, p)
		spec := lim.Spec()
		for _, n := range []int64{-1, spec.MaxCost() + 1, math.MinInt64, math.MaxInt64} {
			res, err := s.Decide(ctx, "k", spec, n)
			if !errors.Is(err, ratekeeper.ErrInvalidCost) {
				t.Errorf("%s: Decide(%d) = %+v, %v; want an error matching ErrInvalidCost", spec.Algorithm(), n, res, err)
			}
		}
		res, err := lim.Peek(ctx, "k")
		testutil.WantResult(t, spec.Algorithm()+": Peek after invalid costs", res, err, true, 3)
	}
}

// A spec that driver.Validate did not make, which no Limiter passes on,
// is refused, never run.
func TestDecideRefusesUnvalidatedSpec(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, spec := range []*driver.ValidSpec{nil, {}} {
		if res, err := s.Decide(ctx, "k", spec, 1); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("Decide(%v) = %+v, %v; want an error matching ErrInvalidPolicy", spec, res, err)
		}
		if err := s.Reset(ctx, "k", spec); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("Reset(%v) = %v; want an error matching ErrInvalidPolicy", spec, err)
		}
	}
}

// A key that expired by the time a new key evicts it is not counted as an
// eviction, even if it had not expired when the new key's decision read
// the clock (it waits for the store's lock in between).
func TestEvictionsCountsOnlyLiveKeys(t *testing.T) {
	clock := newClock()
	var reads atomic.Int64
	var slowed atomic.Bool
	now := func() time.Time {
		reads.Add(1)
		t := clock.Now()
		if slowed.Load() {
			// Each read comes 2ms after the one before.
			clock.Advance(2 * time.Millisecond)
		}
		return t
	}
	s := newStore(t, memstore.WithMaxKeys(1), memstore.WithClock(now))
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: 3 * time.Millisecond})
	ctx := context.Background()
	res, err := lim.Allow(ctx, "a") // full again 3ms later
	testutil.WantResult(t, "Allow on a", res, err, true, 0)
	clock.Advance(2 * time.Millisecond)
	slowed.Store(true)
	// b's decision reads the clock 1ms before a is full again; when b
	// evicts a, 1ms after it.
	res, err = lim.Allow(ctx, "b")
	testutil.WantResult(t, "Allow on b", res, err, true, 0)
	if s.Len() != 1 || s.Evictions() != 0 {
		t.Errorf("Len() = %d, Evictions() = %d after a new key replaced an expired one; want 1, 0 (clock read %d times)",
			s.Len(), s.Evictions(), reads.Load())
	}
}
