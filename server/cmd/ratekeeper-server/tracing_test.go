package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/ratekeeper/ratekeeper/server/internal/otlptest"
	"github.com/ratekeeper/ratekeeper/server/tracing"
)

// With envoy's tracing variables, the server exports a span per
// ShouldRateLimit, in the caller's trace, with the store's call under it;
// the spans still buffered are exported when it stops.
func TestTracingFromEnv(t *testing.T) {
	col := otlptest.Start(t, "grpc")
	t.Setenv("TRACING_ENABLED", "true")
	t.Setenv("TRACING_EXPORTER_PROTOCOL", "grpc")
	t.Setenv("TRACING_SERVICE_NAME", "ratelimit-test")
	t.Setenv("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system")
	t.Setenv("TRACING_SERVICE_INSTANCE_ID", "ratelimit-0")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint)
	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	t.Cleanup(func() {
		// After the server's own cleanup (cleanups run last first): it has
		// stopped, so every span is exported.
		calls := col.Named("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
		if len(calls) != 1 {
			t.Fatalf("%d ShouldRateLimit spans, want 1: %v", len(calls), col.Spans())
		}
		c := calls[0]
		if c.TraceID() != trace || c.ParentID() != parent {
			t.Errorf("trace %s parent %s, want %s %s", c.TraceID(), c.ParentID(), trace, parent)
		}
		if c.Attr("ratelimit.domain") != "web" || c.Attr("ratelimit.descriptors") != "1" || c.Attr("ratelimit.overall_code") != "OK" {
			t.Errorf("attributes %v", c.Attributes)
		}
		for k, v := range map[string]string{"service.name": "ratelimit-test", "service.namespace": "envoy-gateway-system", "service.instance.id": "ratelimit-0"} {
			if c.Resource[k] != v {
				t.Errorf("resource %s = %q, want %q", k, c.Resource[k], v)
			}
		}
		store := col.Named("ratekeeper.Store/Decide")
		if len(store) != 1 || store[0].ParentID() != c.SpanID() {
			t.Errorf("store spans %v, want one under %s", store, c.SpanID())
		}
	})
	path := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, path, oneConfig)
	s := start(t, "-config", path)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+trace+"-"+parent+"-01")
	_, err := rlsv3.NewRateLimitServiceClient(s.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "web",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTracingSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := tracingFromEnv(env(nil))
	if err != nil || s.enabled || s.config.SamplingRate != 1 || s.config.Protocol != "" {
		t.Errorf("defaults: %+v, %v; want off, sampling rate 1", s, err)
	}
	s, err = tracingFromEnv(env(map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "0.25"}))
	if err != nil || !s.enabled || s.config.SamplingRate != 0.25 {
		t.Errorf("enabled at 0.25: %+v, %v", s, err)
	}
	for _, kv := range []map[string]string{{"TRACING_ENABLED": "yes"}, {"TRACING_SAMPLING_RATE": "half"}} {
		if _, err := tracingFromEnv(env(kv)); err == nil {
			t.Errorf("%v: no error", kv)
		}
	}
	if _, err := startTracing(context.Background(), tracingSettings{enabled: true, config: tracing.Config{Protocol: "udp"}}, nil); err == nil {
		t.Error("TRACING_EXPORTER_PROTOCOL=udp: no error")
	}
}
