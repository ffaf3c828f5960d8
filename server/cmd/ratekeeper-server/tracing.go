package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
	"github.com/ratekeeper/ratekeeper/server/internal/logpace"
	"github.com/ratekeeper/ratekeeper/server/tracing"
)

// tracingSettings are envoyproxy/ratelimit's tracing variables, with its
// defaults.
type tracingSettings struct {
	enabled  bool // TRACING_ENABLED
	config   tracing.Config
	endpoint string // OTEL_EXPORTER_OTLP_ENDPOINT, which the SDK reads itself
}

// tracingFromEnv is envoy's TRACING_ENABLED, TRACING_EXPORTER_PROTOCOL,
// TRACING_SAMPLING_RATE and TRACING_SERVICE_NAME, _NAMESPACE and
// _INSTANCE_ID, as the environment gave them. The exporter reads
// OTEL_EXPORTER_OTLP_* itself.
func tracingFromEnv(e *envsettings.Settings) tracingSettings {
	return tracingSettings{enabled: e.TracingEnabled, config: tracing.Config{
		Protocol:          e.TracingExporterProtocol,
		ServiceName:       e.TracingServiceName,
		ServiceNamespace:  e.TracingServiceNamespace,
		ServiceInstanceID: e.TracingServiceInstanceID,
		SamplingRate:      e.TracingSamplingRate,
	}, endpoint: e.TracingEndpoint}
}

func init() { hooks = append(hooks, tracingHook) }

// tracingHook starts tracing when the settings enable it.
func tracingHook(ctx context.Context, s *settings, logger *slog.Logger) (*hookParts, error) {
	tr, err := startTracing(ctx, tracingFromEnv(s.env), logger)
	if err != nil || tr.t == nil {
		return nil, err
	}
	return &hookParts{
		grpcOptions: tr.grpcOptions(),
		wrapStore:   tr.store,
		wrapHTTP:    tr.http,
		close:       tr.t.Shutdown,
	}, nil
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
	// decisions are not. A collector that is down fails every batch, so
	// the lines are paced as the store's errors are.
	var pace logpace.Pacer
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		pace.Log(logger, slog.LevelWarn, time.Now(), "tracing: spans not exported", "err", err)
	}))
	logger.Info("tracing: exporting spans over OTLP", "protocol", s.config.Protocol, "sampling_rate", s.config.SamplingRate,
		"endpoint", s.endpoint)
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
