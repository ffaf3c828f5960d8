package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestNotReadyWhileRedisRefusesWrites: a Redis out of memory (noeviction)
// answers PING but refuses every decision: /readyz answers 503 and gRPC
// health NOT_SERVING until it takes writes again.
func TestNotReadyWhileRedisRefusesWrites(t *testing.T) {
	srv := redistest.StartServerWith(t, "--maxmemory-policy", "noeviction")
	cfg := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, cfg, oneConfig)
	s := start(t, "-config", cfg, "-redis", "redis://"+srv.Addr)
	health := healthpb.NewHealthClient(s.conn)
	until := func(code int, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _ := s.get(t, "/readyz")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
			cancel()
			if got == code && err == nil && resp.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz %d and health %v (%v) after 5 s, want %d and %v", got, resp.GetStatus(), err, code, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until(200, healthpb.HealthCheckResponse_SERVING)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := srv.Client()
	redistest.FillMemory(t, ctx, c)
	until(503, healthpb.HealthCheckResponse_NOT_SERVING)
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	until(200, healthpb.HealthCheckResponse_SERVING)
}
