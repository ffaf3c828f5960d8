package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestOnStoreErrorWhileRedisHangs: while Redis accepts connections but
// does not answer (paused), -on-store-error still decides, before the
// caller's deadline, on gRPC's path (Decide), /json and /v1/decide: the
// store gets only part of the caller's time.
func TestOnStoreErrorWhileRedisHangs(t *testing.T) {
	server := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: server.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	admin := server.Client()
	for _, mode := range []struct {
		name     string
		on       OnStoreError
		code     rlsv3.RateLimitResponse_Code // for Decide; 0 for an error
		httpCode int
	}{
		{"unavailable", FailUnavailable, 0, http.StatusServiceUnavailable},
		{"allow", FailAllow, rlsv3.RateLimitResponse_OK, http.StatusOK},
		{"deny", FailDeny, rlsv3.RateLimitResponse_OVER_LIMIT, http.StatusTooManyRequests},
	} {
		t.Run(mode.name, func(t *testing.T) {
			svc := newService(t, redisstore.New(client, redisstore.WithKeyPrefix(unique(t)+":")), testConfig,
				Options{OnStoreError: mode.on, StoreTimeout: 300 * time.Millisecond})
			req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u")}}
			if _, err := svc.Decide(context.Background(), req); err != nil { // loads the script
				t.Fatal(err)
			}
			if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
				t.Fatal(err)
			}

			// A caller's deadline: answered within it, after StoreTimeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := svc.Decide(ctx, req)
			late := ctx.Err()
			cancel()
			switch {
			case late != nil:
				t.Errorf("Decide answered after the caller's deadline (%v, %v)", resp, err)
			case mode.code == 0 && (!errors.Is(err, ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded)):
				// The store's budget ended, not the caller's deadline:
				// UNAVAILABLE, not DEADLINE_EXCEEDED.
				t.Errorf("Decide: %v, %v; want ErrStoreUnavailable, not matching context.DeadlineExceeded", resp, err)
			case mode.code != 0 && (err != nil || resp.GetOverallCode() != mode.code):
				t.Errorf("Decide: %v, %v; want %v", resp, err, mode.code)
			}

			// No deadline: StoreTimeout bounds the wait, well before the
			// pause ends.
			srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
			defer srv.Close()
			hc := &http.Client{Timeout: 2 * time.Second}
			for _, path := range []string{"/json", "/v1/decide"} {
				start := time.Now()
				r, err := hc.Post(srv.URL+path, "application/json",
					strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`))
				if err != nil {
					t.Errorf("%s: %v", path, err)
					continue
				}
				r.Body.Close()
				if took := time.Since(start); r.StatusCode != mode.httpCode || took > time.Second {
					t.Errorf("%s: %s after %v, want %d within a second", path, r.Status, took, mode.httpCode)
				}
			}
		})
	}
}

// TestStoreBudget: the store gets StoreTimeout, or three quarters of the
// caller's remaining time when that is shorter.
func TestStoreBudget(t *testing.T) {
	svc := New(nil, Options{StoreTimeout: 500 * time.Millisecond})
	if got := svc.storeBudget(context.Background()); got != 500*time.Millisecond {
		t.Errorf("no deadline: %v, want StoreTimeout", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := svc.storeBudget(ctx); got != 500*time.Millisecond {
		t.Errorf("a deadline in 1 s: %v, want StoreTimeout", got)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if got := svc.storeBudget(ctx); got > 150*time.Millisecond || got < 100*time.Millisecond {
		t.Errorf("a deadline in 200 ms: %v, want about 150 ms", got)
	}
}
