package ratekeeper_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// leaseCountingStore counts a store's lease steps and decisions.
type leaseCountingStore struct {
	*memstore.Store
	leases, decisions atomic.Int64
}

func (s *leaseCountingStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.decisions.Add(1)
	return s.Store.Decide(ctx, key, spec, n)
}

func (s *leaseCountingStore) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	s.leases.Add(1)
	return s.Store.Lease(ctx, key, spec, req)
}

// plainStore hides memstore's Leaser.
type plainStore struct{ ratekeeper.Store }

func TestLeasesRefused(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	ttl := ratekeeper.WithLeases(ratekeeper.Leases{TTL: 50 * time.Millisecond})
	for name, p := range map[string]ratekeeper.Policy{
		"log":     ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Second},
		"counter": ratekeeper.SlidingWindowCounter{Limit: 10, Window: time.Second},
		"all": ratekeeper.All(ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1},
			ratekeeper.FixedWindow{Limit: 5, Window: time.Minute}),
	} {
		var pe *ratekeeper.PolicyError
		if _, err := ratekeeper.New(store, p, ttl); !errors.As(err, &pe) {
			t.Errorf("%s with leases: %v, want a *PolicyError", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	gcra := ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}
	for _, d := range []time.Duration{0, time.Microsecond, ratekeeper.MaxLeaseTTL + 1} {
		var pe *ratekeeper.PolicyError
		if _, err := ratekeeper.New(store, gcra, ratekeeper.WithLeases(ratekeeper.Leases{TTL: d})); !errors.As(err, &pe) {
			t.Errorf("TTL %v: %v, want a *PolicyError", d, err)
		}
	}
	if _, err := ratekeeper.New(plainStore{store}, gcra, ttl); !errors.Is(err, ratekeeper.ErrNoLeases) {
		t.Errorf("a store without leases: %v, want ErrNoLeases", err)
	}
}

// TestLeasesSaveCalls: a hot key costs its store a lease step per lease,
// far fewer than its decisions, and admits exactly what the policy does.
func TestLeasesSaveCalls(t *testing.T) {
	store := &leaseCountingStore{Store: memstore.New()}
	defer store.Close()
	policy := ratekeeper.FixedWindow{Limit: 100_000, Window: time.Hour}
	lim, err := ratekeeper.New(store, policy, ratekeeper.WithLeases(ratekeeper.Leases{TTL: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20_000 {
				res, err := lim.Allow(ctx, "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	calls := store.leases.Load() + store.decisions.Load()
	t.Logf("160,000 requests: %d admitted, %d store calls", admitted.Load(), calls)
	if admitted.Load() != 100_000 {
		t.Errorf("admitted %d of 160,000 on a window of 100,000", admitted.Load())
	}
	if calls > 160_000/20 {
		t.Errorf("%d store calls for 160,000 requests: leases saved too little", calls)
	}
	// Everything unspent went back at Close: the window holds what was
	// admitted, no more.
	plain, _ := ratekeeper.New(store, policy)
	if res, err := plain.Peek(ctx, "hot"); err != nil || res.Remaining != 0 {
		t.Errorf("Peek after Close = %+v, %v; want 0 left", res, err)
	}
}

// TestLeasesAPI: Peek, Charge, Refund, Reset, Wait and a denial with
// leases, on a fixed window, which nothing refills.
func TestLeasesAPI(t *testing.T) {
	store := &leaseCountingStore{Store: memstore.New()}
	defer store.Close()
	ctx := context.Background()
	policy := ratekeeper.FixedWindow{Limit: 100, Window: time.Hour}
	lim, err := ratekeeper.New(store, policy, ratekeeper.WithLeases(ratekeeper.Leases{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	plain, _ := ratekeeper.New(store, policy)
	// A first request takes only its own cost; the next ones lease.
	for range 10 {
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	}
	held, err := plain.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := lim.Peek(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Peek counts this Limiter's lease: what the store has left, plus
	// what the lease holds, is what 10 requests left of 100.
	if mine.Remaining != 90 || held.Remaining >= 90 {
		t.Fatalf("Peek = %v left, the store's %v; want 90, and the store's less by the lease", mine.Remaining, held.Remaining)
	}
	// Charge gives the lease back first: the store then holds exactly
	// the 10 taken and the 5 charged.
	if res, err := lim.Charge(ctx, "k", 5); err != nil || res.Remaining != 85 {
		t.Fatalf("Charge(5) = %+v, %v; want 85 left", res, err)
	}
	if res, err := lim.Refund(ctx, "k", 5); err != nil || res.Remaining != 90 {
		t.Fatalf("Refund(5) = %+v, %v; want 90 left", res, err)
	}
	// Reset drops the lease: the key is full again everywhere.
	lim.Allow(ctx, "k")
	lim.Allow(ctx, "k")
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Peek(ctx, "k"); err != nil || res.Remaining != 100 {
		t.Fatalf("Peek after Reset = %+v, %v; want 100", res, err)
	}
	// Drained: the denial is the store's, with its RetryAfter.
	if res, err := lim.AllowN(ctx, "k", 100); err != nil || !res.Allowed {
		t.Fatalf("AllowN(100) = %+v, %v", res, err)
	}
	res, err := lim.Allow(ctx, "k")
	want, _ := plain.Peek(ctx, "k")
	if d := res.RetryAfter - want.RetryAfter; err != nil || res.Allowed || d < 0 || d > 10*time.Millisecond {
		t.Fatalf("Allow when drained = %+v, %v; want the store's denial, %v", res, err, want.RetryAfter)
	}
	// Wait: with a deadline shorter than the window, it gives up at once.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := lim.Wait(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a drained window: %v, want DeadlineExceeded", err)
	}
	if err := lim.Wait(ctx, "other"); err != nil {
		t.Fatalf("Wait on a fresh key: %v", err)
	}
}

// TestLeasesMemory: at most MaxKeys keys hold a lease; a lease idle for a
// TTL is given back and forgotten, and Close gives back the rest.
func TestLeasesMemory(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	ctx := context.Background()
	policy := ratekeeper.FixedWindow{Limit: 1000, Window: time.Hour}
	const ttl = 20 * time.Millisecond
	lim, err := ratekeeper.New(store, policy, ratekeeper.WithLeases(ratekeeper.Leases{TTL: ttl, MaxKeys: 4}))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := ratekeeper.New(store, policy)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range keys {
		for range 5 {
			lim.Allow(ctx, k)
		}
	}
	if n := ratekeeper.LeasedKeys(lim); n > 4 {
		t.Errorf("%d keys hold a lease, MaxKeys 4", n)
	}
	// Idle for more than a TTL: given back and forgotten.
	time.Sleep(3 * ttl)
	if n := ratekeeper.LeasedKeys(lim); n != 0 {
		t.Errorf("%d keys hold a lease after %v idle, want 0", n, 3*ttl)
	}
	for _, k := range keys {
		if res, err := plain.Peek(ctx, k); err != nil || res.Remaining != 995 {
			t.Errorf("%s: Peek = %+v, %v; want 995 left, every lease given back", k, res, err)
		}
	}
	lim.Allow(ctx, "a")
	lim.Allow(ctx, "a")
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if res, err := plain.Peek(ctx, "a"); err != nil || res.Remaining != 993 {
		t.Errorf("Peek after Close = %+v, %v; want 993 left", res, err)
	}
}

// TestLeasesAfterClose: a Limiter used after Close takes no lease, so
// nothing stays held: the store decides each request.
func TestLeasesAfterClose(t *testing.T) {
	store := &leaseCountingStore{Store: memstore.New()}
	defer store.Close()
	ctx := context.Background()
	p := ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Hour}
	lim, err := ratekeeper.New(store, p, ratekeeper.WithLeases(ratekeeper.Leases{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("before Close: %+v, %v", res, err)
		}
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	leases, decisions := store.leases.Load(), store.decisions.Load()
	for range 10 {
		if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("after Close: %+v, %v", res, err)
		}
	}
	if n := store.leases.Load() - leases; n != 0 {
		t.Errorf("after Close, %d lease steps; want none", n)
	}
	if n := store.decisions.Load() - decisions; n != 10 {
		t.Errorf("after Close, %d decisions in the store for 10 requests", n)
	}
	plain, err := ratekeeper.New(plainStore{store.Store}, p)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := plain.Peek(ctx, "k"); err != nil || res.Remaining != 80 {
		t.Errorf("after 20 admissions and Close, Peek says %v remain (%v); want 80: nothing held", res.Remaining, err)
	}
}

// TestLeasesTakenAhead: a Limiter with leases that the store denied asks
// again by itself when a unit is back, so its next request finds it in
// its lease, without a call to the store.
func TestLeasesTakenAhead(t *testing.T) {
	store := &leaseCountingStore{Store: memstore.New()}
	defer store.Close()
	ctx := context.Background()
	p := ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: 30 * time.Millisecond}
	plain, err := ratekeeper.New(plainStore{store.Store}, p)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratekeeper.New(store, p, ratekeeper.WithLeases(ratekeeper.Leases{TTL: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for range 2 {
		if res, err := plain.Allow(ctx, "k"); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	res, err := lim.Allow(ctx, "k")
	if err != nil || res.Allowed {
		t.Fatalf("the key is drained, yet %+v, %v", res, err)
	}
	steps := store.leases.Load()
	time.Sleep(res.RetryAfter + 20*time.Millisecond)
	ahead := store.leases.Load() - steps
	if ahead == 0 {
		t.Fatalf("no lease step in %v after a denial: none taken ahead", res.RetryAfter+20*time.Millisecond)
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed {
		t.Fatalf("after a lease taken ahead: %+v, %v", res, err)
	}
	if n := store.leases.Load() - steps; n != ahead {
		t.Errorf("the request after a lease taken ahead made %d lease steps; want none", n-ahead)
	}
	if res, err := plain.Allow(ctx, "k"); err != nil || res.Allowed {
		t.Errorf("the unit back is the lease's, yet a Limiter without leases got %+v, %v", res, err)
	}
}
