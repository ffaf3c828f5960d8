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

// countingStore counts a store's lease steps and decisions.
type countingStore struct {
	*memstore.Store
	leases, decisions atomic.Int64
}

func (s *countingStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.decisions.Add(1)
	return s.Store.Decide(ctx, key, spec, n)
}

func (s *countingStore) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
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
	store := &countingStore{Store: memstore.New()}
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
