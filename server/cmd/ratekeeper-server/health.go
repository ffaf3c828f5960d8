package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthServices are the names gRPC health reports under: the whole
// server, the rate limit service, and "ratelimit", envoy's name.
var healthServices = []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}

// configHealthy reports whether the configuration lets the service be
// healthy: always, unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED asks
// for a configuration with a domain first.
func configHealthy(s *settings, sink *configSink) func() bool {
	if !s.healthyWithAConfig {
		return func() bool { return true }
	}
	return sink.hasDomain.Load
}

// withHealthcheck answers GET /healthcheck with 500 while healthy says
// no, as envoy does, and leaves the rest to h.
func withHealthcheck(h http.Handler, healthy func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthcheck" && !healthy() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// watchHealth keeps gRPC health in step with the store and the
// configuration: SERVING while both allow, NOT_SERVING while not.
func watchHealth(ctx context.Context, h *health.Server, ready func() error, healthy func() bool, logger *slog.Logger) {
	var last healthpb.HealthCheckResponse_ServingStatus = -1
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if ready != nil {
			if err := ready(); err != nil {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				if last != st {
					logger.Warn("not ready: the store does not answer", "err", err)
				}
			} else if last == healthpb.HealthCheckResponse_NOT_SERVING {
				logger.Info("ready: the store answers")
			}
		}
		if !healthy() {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if st != last {
			for _, name := range healthServices {
				h.SetServingStatus(name, st)
			}
			last = st
		}
		select {
		case <-ctx.Done():
			h.Shutdown()
			return
		case <-t.C:
		}
	}
}
