package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// BenchmarkUnary measures one unary call over loopback, on one goroutine:
// to a server without the interceptor, and to one with it over each
// store. The difference is what the interceptor adds to a call, decision
// included. Every call is allowed.
func BenchmarkUnary(b *testing.B) {
	roomy := ratekeeper.GCRA{Rate: 1e6, Period: time.Second, Burst: 1e6}
	b.Run("none", func(b *testing.B) { benchUnary(b, nil) })
	b.Run("memstore", func(b *testing.B) {
		s := memstore.New()
		b.Cleanup(func() { s.Close() })
		benchUnary(b, interceptors(newLimiter(b, s, roomy)))
	})
	b.Run("redisstore", func(b *testing.B) {
		s := redisstore.New(redistest.Client(b), redisstore.WithKeyPrefix(redistest.Prefix(b)))
		benchUnary(b, interceptors(newLimiter(b, s, roomy)))
	})
	b.Run("redisstore-no-timeout", func(b *testing.B) {
		s := redisstore.New(redistest.Client(b), redisstore.WithKeyPrefix(redistest.Prefix(b)))
		benchUnary(b, interceptors(newLimiter(b, s, roomy), grpclimit.WithStoreTimeout(0)))
	})
	// The decision alone, as the interceptor makes it (within the store
	// timeout), for comparison.
	b.Run("redisstore-decision", func(b *testing.B) {
		s := redisstore.New(redistest.Client(b), redisstore.WithKeyPrefix(redistest.Prefix(b)))
		lim := newLimiter(b, s, roomy)
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), grpclimit.DefaultStoreTimeout)
			_, err := lim.Allow(ctx, "ip:127.0.0.1")
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchUnary(b *testing.B, opts []grpc.ServerOption) {
	c := serve(b, &testServer{}, opts)
	ctx := context.Background()
	if _, err := unary(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := unary(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
