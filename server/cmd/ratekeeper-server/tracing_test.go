package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
	"github.com/ratekeeper/ratekeeper/server/internal/logpace"
	"github.com/ratekeeper/ratekeeper/server/internal/otlptest"
	"github.com/ratekeeper/ratekeeper/server/tracing"
)

// With envoy's tracing variables, the server exports a span per
// ShouldRateLimit, in the caller's trace, with the store's call under it;
// the spans still buffered are exported when it stops.
func TestTracingFromEnv(t *testing.T) {
	col := otlptest.Start(t, "grpc")
	env := map[string]string{
		"TRACING_ENABLED":             "true",
		"TRACING_EXPORTER_PROTOCOL":   "grpc",
		"TRACING_SERVICE_NAME":        "ratelimit-test",
		"TRACING_SERVICE_NAMESPACE":   "envoy-gateway-system",
		"TRACING_SERVICE_INSTANCE_ID": "ratelimit-0",
	}
	// The SDK reads its own variables from the process.
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
	s := startEnv(t, envOf(env), "-config", path)
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
	load := func(kv map[string]string) tracingSettings {
		t.Helper()
		e, err := envsettings.Load(envOf(kv))
		if err != nil {
			t.Fatal(err)
		}
		return tracingFromEnv(e)
	}
	if s := load(nil); s.enabled || s.config.SamplingRate != 1 || s.config.Protocol != "http" || s.config.ServiceName != "RateLimit" {
		t.Errorf("defaults: %+v; want off, sampling rate 1, http, envoy's service name", s)
	}
	if s := load(map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "0.25"}); !s.enabled || s.config.SamplingRate != 0.25 {
		t.Errorf("enabled at 0.25: %+v", s)
	}
	if _, err := startTracing(context.Background(), tracingSettings{enabled: true, config: tracing.Config{Protocol: "udp"}}, nil); err == nil {
		t.Error("TRACING_EXPORTER_PROTOCOL=udp: no error")
	}
}

// TestTracingExportErrorsPaced: with a collector that refuses every
// export, under many spans, the failures are logged at most once a
// second, each line counting those left out.
func TestTracingExportErrorsPaced(t *testing.T) {
	col := otlptest.Start(t, "grpc")
	col.Refuse(true)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint)
	// Small batches sent often: many exports, each one refused.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "32")
	path := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, path, oneConfig)
	begin := time.Now()
	s := startEnv(t, envOf(map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc"}), "-config", path)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	client := rlsv3.NewRateLimitServiceClient(s.conn)
	req := &rlsv3.RateLimitRequest{
		Domain:      "web",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}},
	}
	var calls atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := client.ShouldRateLimit(ctx, req); err == nil {
					calls.Add(1)
				}
			}
		})
	}
	wg.Wait()
	log, elapsed, refused := s.log.String(), time.Since(begin), col.Refused()
	var lines []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "tracing: spans not exported") {
			lines = append(lines, l)
		}
	}
	t.Logf("%d calls, %d exports refused, %d log lines in %v", calls.Load(), refused, len(lines), elapsed.Round(time.Millisecond))
	if refused < 20 {
		t.Fatalf("only %d exports refused in %v: too few to tell pacing from quiet", refused, elapsed)
	}
	if most := int(elapsed/logpace.Interval) + 1; len(lines) == 0 || len(lines) > most {
		t.Fatalf("%d log lines of failed exports in %v, want 1 to %d:\n%s", len(lines), elapsed, most, strings.Join(lines, ""))
	}
	if len(lines) > 1 {
		last := lines[len(lines)-1]
		_, n, _ := strings.Cut(last, logpace.NotLogged+"=")
		n, _, _ = strings.Cut(strings.TrimSpace(n), " ")
		if left, err := strconv.Atoi(n); err != nil || left == 0 {
			t.Errorf("the last line does not count the failures left out: %s", last)
		}
	}
}
