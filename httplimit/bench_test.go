package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// BenchmarkMiddleware measures one request through the middleware with its
// default options, on one goroutine, over each store: the latency the
// middleware adds in front of a handler, decision included. Every request
// is allowed.
func BenchmarkMiddleware(b *testing.B) {
	roomy := ratekeeper.TokenBucket{Capacity: 1e9, RefillRate: 1e9, RefillInterval: time.Second}
	b.Run("memstore", func(b *testing.B) {
		s := memstore.New()
		b.Cleanup(func() { s.Close() })
		benchMiddleware(b, s, roomy)
	})
	b.Run("redisstore", func(b *testing.B) {
		s := redisstore.New(redistest.Client(b), redisstore.WithKeyPrefix(redistest.Prefix(b)))
		benchMiddleware(b, s, roomy)
	})
}

func benchMiddleware(b *testing.B, s ratekeeper.Store, p ratekeeper.Policy) {
	lim, err := ratekeeper.New(s, p)
	if err != nil {
		b.Fatal(err)
	}
	h := Middleware(lim)(okHandler)
	r := request("203.0.113.7:1", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d, want %d", w.Code, http.StatusOK)
		}
	}
}
