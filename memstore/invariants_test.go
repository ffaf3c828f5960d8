package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// checkInvariants fails t unless Store.entries and Store.keys agree:
// each held entry is live, expires no sooner than its lower bound, knows
// its index, holds a key no other entry
// holds, and is the one its key maps to; the map holds no other entry.
func (s *Store) checkInvariants(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make(map[string]bool, len(s.entries))
	for i, e := range s.entries {
		e.mu.Lock()
		dead, expires := e.dead(), e.expires()
		e.mu.Unlock()
		switch {
		case dead:
			t.Errorf("entry %d, key %q, is dead", i, e.key)
		case e.soonest > expires:
			t.Errorf("key %q: expiry %d is below its lower bound %d", e.key, expires, e.soonest)
		case e.index != i:
			t.Errorf("entry %d, key %q, has index %d", i, e.key, e.index)
		case keys[e.key]:
			t.Errorf("key %q is held twice", e.key)
		case s.load(e.key) != e:
			t.Errorf("key %q does not map to its entry", e.key)
		}
		keys[e.key] = true
	}
	mapped := 0
	s.keys.Range(func(k, v any) bool {
		mapped++
		if e := v.(*entry); e.key != k || !keys[e.key] {
			t.Errorf("key %q maps to an entry of key %q, not held", k, e.key)
		}
		return true
	})
	if mapped != len(s.entries) {
		t.Errorf("%d keys mapped, %d entries held", mapped, len(s.entries))
	}
}

// Keys of several policies, decided, reset, evicted and swept from many
// goroutines at once while the clock moves, leave the store consistent.
func TestInvariantsUnderChurn(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	s := New(WithMaxKeys(100), WithSweepInterval(0),
		WithClock(func() time.Time { return time.UnixMicro(clock.Load()) }))
	defer s.Close()
	tb := ratekeeper.TokenBucket{Capacity: 3, RefillRate: 1, RefillInterval: 5 * time.Millisecond}
	policies := []ratekeeper.Policy{
		tb,
		ratekeeper.Named("other", tb),
		ratekeeper.SlidingWindowLog{Limit: 3, Window: 20 * time.Millisecond},
		ratekeeper.All(tb, ratekeeper.Named("hourly", ratekeeper.GCRA{Rate: 100, Period: time.Hour, Burst: 3})),
	}
	var lims []*ratekeeper.Limiter
	for _, p := range policies {
		lim, err := ratekeeper.New(s, p)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20_000 {
				lim := lims[rand.IntN(len(lims))]
				key := fmt.Sprint("k", rand.IntN(300))
				var err error
				switch r := rand.IntN(100); {
				case r < 10:
					err = lim.Reset(ctx, key)
				case r < 12 && w == 0:
					s.Sweep()
				default:
					_, err = lim.AllowN(ctx, key, rand.Int64N(3))
				}
				if err != nil {
					t.Error(err)
					return
				}
				if i%64 == 0 {
					clock.Add(int64(rand.IntN(2000)))
				}
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > s.MaxKeys() {
		t.Errorf("Len() = %d, above MaxKeys() = %d", n, s.MaxKeys())
	}
	if s.Evictions() == 0 {
		t.Error("no eviction: the test did not fill the store")
	}
	s.checkInvariants(t)
	clock.Add(time.Hour.Microseconds())
	s.Sweep()
	if n := s.Len(); n != 0 {
		t.Errorf("Len() = %d after a sweep once every key is full again, want 0", n)
	}
	s.checkInvariants(t)
}
