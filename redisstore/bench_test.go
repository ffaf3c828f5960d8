package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// benchBucket never runs dry, so the benchmarks measure allowed requests,
// and its keys are full again, and expire, within a second.
var benchBucket = ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: ratekeeper.MaxLimit, RefillInterval: time.Second}

func BenchmarkAllow(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	lim, _, _ := newLimiter(b, benchBucket)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("user:", i)
	}
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
