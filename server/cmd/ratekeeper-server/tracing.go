package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/tracing"
)

// tracingSettings are envoyproxy/ratelimit's tracing variables, with its
// defaults.
type tracingSettings struct {
	enabled bool // TRACING_ENABLED
	config  tracing.Config
}

// tracingFromEnv reads TRACING_ENABLED, TRACING_EXPORTER_PROTOCOL,
// TRACING_SAMPLING_RATE and TRACING_SERVICE_NAME, _NAMESPACE and
// _INSTANCE_ID. The exporter reads OTEL_EXPORTER_OTLP_* itself.
func tracingFromEnv(getenv func(string) string) (tracingSettings, error) {
	s := tracingSettings{config: tracing.Config{
		Protocol:          getenv("TRACING_EXPORTER_PROTOCOL"),
		ServiceName:       getenv("TRACING_SERVICE_NAME"),
		ServiceNamespace:  getenv("TRACING_SERVICE_NAMESPACE"),
		ServiceInstanceID: getenv("TRACING_SERVICE_INSTANCE_ID"),
		SamplingRate:      1,
	}}
	if v := getenv("TRACING_ENABLED"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return s, fmt.Errorf("TRACING_ENABLED=%q: want true or false", v)
		}
		s.enabled = b
	}
	if v := getenv("TRACING_SAMPLING_RATE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return s, fmt.Errorf("TRACING_SAMPLING_RATE=%q: want a number between 0 and 1", v)
		}
		s.config.SamplingRate = f
	}
	return s, nil
}

// tracer is the service's tracing, or none: each method passes its
// argument through unchanged when tracing is off.
type tracer struct{ t *tracing.Tracer }

// startTracing starts the OTLP exporter when the settings enable it.
func startTracing(ctx context.Context, s tracingSettings, logger *slog.Logger) (tracer, error) {
	if !s.enabled {
		return tracer{}, nil
	}
	t, err := tracing.New(ctx, s.config)
	if err != nil {
		return tracer{}, err
	}
	// The SDK reports failed exports here; the spans are lost, the
	// decisions are not.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: spans not exported", "err", err)
	}))
	logger.Info("tracing: exporting spans over OTLP", "protocol", s.config.Protocol, "sampling_rate", s.config.SamplingRate,
		"endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	return tracer{t}, nil
}

// store traces st's decisions.
func (tr tracer) store(st server.Store) server.Store {
	if tr.t == nil {
		return st
	}
	return tr.t.Store(st)
}

// grpcOptions trace ShouldRateLimit.
func (tr tracer) grpcOptions() []grpc.ServerOption {
	if tr.t == nil {
		return nil
	}
	return []grpc.ServerOption{tr.t.ServerOption()}
}

// http traces h's decisions.
func (tr tracer) http(h http.Handler) http.Handler {
	if tr.t == nil {
		return h
	}
	return tr.t.HTTPHandler(h)
}

// shutdown exports the spans not yet exported, for up to five seconds.
func (tr tracer) shutdown(logger *slog.Logger) {
	if tr.t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.t.Shutdown(ctx); err != nil {
		logger.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}

// startTracingFromEnv starts tracing as the environment says.
func startTracingFromEnv(ctx context.Context, logger *slog.Logger) (tracer, error) {
	s, err := tracingFromEnv(os.Getenv)
	if err != nil {
		return tracer{}, err
	}
	return startTracing(ctx, s, logger)
}
