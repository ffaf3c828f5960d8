package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// A DecideAll that takes from more new keys than the store may hold still
// decides, and leaves the store within its bound.
func TestDecideAllMaxKeys(t *testing.T) {
	s := newStore(t, memstore.WithMaxKeys(2))
	lim := newLimiter(t, s, ratekeeper.FixedWindow{Limit: 3, Window: time.Hour})
	reqs := []driver.Request{{Key: "a", Spec: lim.Spec(), N: 1}, {Key: "b", Spec: lim.Spec(), N: 1}, {Key: "c", Spec: lim.Spec(), N: 1}}
	for i := range 3 {
		res, err := s.DecideAll(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range res {
			if !r.Allowed {
				t.Fatalf("call %d, request %d: %+v, want allowed", i, j, r)
			}
		}
		if n := s.Len(); n > 2 {
			t.Fatalf("call %d: the store holds %d keys, more than its bound of 2", i, n)
		}
	}
	// With room, a new key is added before its take: the batch counts.
	s = newStore(t, memstore.WithMaxKeys(10))
	if _, err := s.DecideAll(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("the store holds %d keys, want 3", n)
	}
	// A denied batch adds no key that decides otherwise: the keys it
	// would have taken from are fresh.
	big := driver.Request{Key: "d", Spec: lim.Spec(), N: 3}
	exhausted := driver.Request{Key: "a", Spec: lim.Spec(), N: 3}
	res, err := s.DecideAll(context.Background(), []driver.Request{big, exhausted})
	if err != nil || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("%+v, %v: want d allowed, a denied", res, err)
	}
	if r, _ := lim.Peek(context.Background(), "d"); r.Remaining != 3 {
		t.Fatalf("d after a denied batch: %+v, want untouched", r)
	}
}

// DecideAlls over overlapping keys, Decides, eviction from a small store,
// Resets and sweeps, all at once: no deadlock (the test ends), and under
// -race no data race.
func TestDecideAllConcurrentWithEviction(t *testing.T) {
	clock := newClock()
	s := newStore(t, memstore.WithMaxKeys(8), memstore.WithClock(clock.Now))
	lims := make([]*ratekeeper.Limiter, len(policies))
	for i, p := range policies {
		lims[i] = newLimiter(t, s, p)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				key := func() string { return fmt.Sprint("k", r.IntN(16)) }
				switch r.IntN(5) {
				case 0:
					lims[r.IntN(len(lims))].Allow(ctx, key())
				case 1:
					lims[r.IntN(len(lims))].Reset(ctx, key())
				case 2:
					s.Sweep()
				default:
					reqs := make([]driver.Request, 1+r.IntN(5))
					for i := range reqs {
						reqs[i] = driver.Request{Key: key(), Spec: lims[r.IntN(len(lims))].Spec(), N: r.Int64N(2)}
					}
					if _, err := s.DecideAll(ctx, reqs); err != nil {
						t.Error(err)
						return
					}
				}
				clock.Advance(time.Duration(r.IntN(50)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > 8 {
		t.Errorf("the store holds %d keys, more than its bound of 8", n)
	}
}
