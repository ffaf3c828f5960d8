package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestCardinality drives a million distinct keys through a store bounded
// to a tenth of them: it never holds more keys than its bound, every key
// it let go is counted as an eviction, and its memory stops growing once
// it is full.
func TestCardinality(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys: skipped with -short")
	}
	const keys, bound = 1_000_000, 100_000
	s := memstore.New(memstore.WithMaxKeys(bound), memstore.WithSweepInterval(0))
	defer s.Close()
	// Nothing refills during the test, so no key expires: every key that
	// leaves is evicted.
	lim, err := ratekeeper.New(s, ratekeeper.TokenBucket{Capacity: 5, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxKeys() < bound {
		t.Fatalf("MaxKeys() = %d, below the %d asked for", s.MaxKeys(), bound)
	}
	// Keys go through in two rounds, each spread over the CPUs: up to
	// twice the bound, when the store is full and has evicted already,
	// then the rest. Meanwhile the bound is checked.
	run := func(from, to int) {
		var wg, checker sync.WaitGroup
		done := make(chan struct{})
		checker.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				if n := s.Len(); n > s.MaxKeys() {
					t.Errorf("Len() = %d, above MaxKeys() = %d", n, s.MaxKeys())
					return
				}
			}
		})
		workers := runtime.GOMAXPROCS(0)
		for w := range workers {
			wg.Go(func() {
				ctx := context.Background()
				key := make([]byte, 0, 16)
				for i := from + w; i < to; i += workers {
					key = strconv.AppendInt(append(key[:0], 'k'), int64(i), 10)
					res, err := lim.Allow(ctx, string(key))
					if err != nil || !res.Allowed || res.Remaining != 4 {
						t.Errorf("Allow on new key %s: %+v, %v", key, res, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(done)
		checker.Wait()
	}
	run(0, 2*bound)
	full := liveHeap()
	run(2*bound, keys)
	n, evicted := s.Len(), s.Evictions()
	if n > s.MaxKeys() {
		t.Errorf("Len() = %d, above MaxKeys() = %d", n, s.MaxKeys())
	}
	if int64(n)+evicted != keys {
		t.Errorf("Len() %d + Evictions() %d = %d, want the %d keys decided", n, evicted, int64(n)+evicted, keys)
	}
	end := liveHeap()
	t.Logf("Len %d of MaxKeys %d, %d evictions; live heap %.1f MB when full, %.1f MB at the end",
		n, s.MaxKeys(), evicted, float64(full)/1e6, float64(end)/1e6)
	// 800,000 more keys went through since: a store whose memory grew
	// with them would be far past this.
	if end > full+full/2 {
		t.Errorf("live heap grew from %d to %d bytes while the store stayed full", full, end)
	}
}

// liveHeap returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
