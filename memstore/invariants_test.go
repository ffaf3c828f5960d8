package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ratekeeper/ratekeeper"
)

// checkInvariants fails t unless the tables and Store.entries agree: each
// held entry is live, expires no sooner than its held lower bound, knows
// its index, holds a key no other entry holds,
// and is the one an exact lookup of its key finds; the tables hold no
// other entry, each in the table its hash chooses; their counts are
// right, and each keeps an empty bucket, which ends every probe.
func (s *Store) checkInvariants(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make(map[*entry]bool, len(s.entries))
	keys := make(map[string]bool, len(s.entries))
	for i, hd := range s.entries {
		e := hd.e
		e.mu.Lock()
		dead, expires := e.dead(), e.expires()
		e.mu.Unlock()
		switch {
		case dead:
			t.Errorf("entry %d, key %q, is dead", i, e.key)
		case hd.expires > expires:
			t.Errorf("key %q: expiry %d is below its lower bound %d", e.key, expires, hd.expires)
		case e.index != i:
			t.Errorf("entry %d, key %q, has index %d", i, e.key, e.index)
		case keys[e.key]:
			t.Errorf("key %q is held twice", e.key)
		case s.lookup(e.key, s.hash(e.key), true) != e:
			t.Errorf("key %q: a lookup does not find its entry", e.key)
		}
		held[e], keys[e.key] = true, true
	}
	live := 0
	for ti := range s.tables {
		tb := s.tables[ti].Load()
		used, n, empty := 0, 0, 0
		for bi := range tb.buckets {
			b := &tb.buckets[bi]
			h, e := b.hash.Load(), b.entry.Load()
			switch {
			case h == 0:
				empty++
				if e != nil {
					t.Errorf("table %d, bucket %d: an entry without a hash", ti, bi)
				}
				continue
			case e != nil && !held[e]:
				t.Errorf("table %d, bucket %d: key %q is not held", ti, bi, e.key)
			case e != nil && (h != s.hash(e.key) || int(h>>(64-tableBits)) != ti):
				t.Errorf("table %d, bucket %d: key %q under the wrong hash", ti, bi, e.key)
			}
			used++
			if e != nil {
				n++
			}
		}
		if used != tb.used || n != tb.live || empty == 0 {
			t.Errorf("table %d: %d used, %d live, %d empty; counted %d used, %d live",
				ti, used, n, empty, tb.used, tb.live)
		}
		live += n
	}
	if live != len(s.entries) {
		t.Errorf("the tables hold %d entries, Store.entries %d", live, len(s.entries))
	}
}

// Keys of several policies, decided, reset, evicted and swept from many
// goroutines at once while the clock moves, leave the table consistent.
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

// The layout that entry's and table's comments describe.
func TestLayout(t *testing.T) {
	var e entry
	if n := unsafe.Sizeof(e); n > 128 || n <= 112 {
		t.Errorf("an entry takes %d bytes, want a size class of 128", n)
	}
	// The lock, the key, and the first slot's policy, expiry and first
	// two words of state.
	if end := unsafe.Offsetof(e.first) + unsafe.Offsetof(e.first.state) + 24; end > 64 {
		t.Errorf("the first two words of the first slot's state end at byte %d, want 64 at most", end)
	}
	var tb table
	if unsafe.Sizeof(tb) != 128 || unsafe.Offsetof(tb.used) != 64 {
		t.Errorf("a table takes %d bytes, its counts start at %d: want 128 and 64",
			unsafe.Sizeof(tb), unsafe.Offsetof(tb.used))
	}
}
