package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// benchBucket never runs dry, so the benchmarks measure allowed requests.
var benchBucket = ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: ratekeeper.MaxLimit, RefillInterval: time.Second}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
	return keys
}

func BenchmarkAllow(b *testing.B) {
	lim := newLimiter(b, newStore(b), benchBucket)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllow100kKeys(b *testing.B) {
	s := newStore(b)
	lim := newLimiter(b, s, benchBucket)
	ctx := context.Background()
	keys := benchKeys(100_000)
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	if s.Len() != len(keys) {
		b.Fatalf("Len() = %d, want %d", s.Len(), len(keys))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := lim.Allow(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	lim := newLimiter(b, newStore(b), benchBucket)
	keys := benchKeys(10_000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			if _, err := lim.Allow(ctx, keys[i]); err != nil {
				b.Error(err)
				return
			}
			i = (i + 1) % len(keys)
		}
	})
}
