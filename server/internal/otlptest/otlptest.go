// Package otlptest is an OTLP trace receiver for tests: Start runs one on
// a loopback port, over gRPC or HTTP as OpenTelemetry's collector serves
// them, and keeps every span it receives for the test to look at.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, with the attributes of its resource.
type Span struct {
	*tracepb.Span
	// Resource holds the resource's attributes, as strings.
	Resource map[string]string
}

// TraceID returns the span's trace ID in hex, as W3C traceparent has it.
func (s Span) TraceID() string { return hex.EncodeToString(s.TraceId) }

// SpanID returns the span's ID in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.Span.SpanId) }

// ParentID returns the span's parent's ID in hex, "" for a root.
func (s Span) ParentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Attr returns the span's attribute key as a string, "" if absent.
func (s Span) Attr(key string) string { return attrs(s.Attributes)[key] }

// Collector receives spans over OTLP.
type Collector struct {
	collectorpb.UnimplementedTraceServiceServer
	// Endpoint is the collector's URL, as OTEL_EXPORTER_OTLP_ENDPOINT
	// names it.
	Endpoint string

	mu    sync.Mutex
	spans []Span

	refuse  atomic.Bool
	refused atomic.Int64
}

// Start runs a collector for protocol, "grpc" or "http" (OTLP/HTTP with
// protobuf), until the test ends.
func Start(t testing.TB, protocol string) *Collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Endpoint: "http://" + ln.Addr().String()}
	switch protocol {
	case "grpc":
		g := grpc.NewServer()
		collectorpb.RegisterTraceServiceServer(g, c)
		go g.Serve(ln)
		t.Cleanup(g.Stop)
	case "http":
		srv := &http.Server{Handler: c}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	default:
		ln.Close()
		t.Fatalf("otlptest: protocol %q, want grpc or http", protocol)
	}
	return c
}

// Refuse makes the collector refuse every export from now on, with an
// error the exporter does not retry (gRPC's PERMISSION_DENIED, HTTP's
// 403), as a collector that does not accept the service's spans does; or
// accept them again.
func (c *Collector) Refuse(refuse bool) { c.refuse.Store(refuse) }

// Refused is how many exports the collector refused.
func (c *Collector) Refused() int { return int(c.refused.Load()) }

// Spans returns the spans received so far, in the order they came.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Named returns the spans received so far that have that name.
func (c *Collector) Named(name string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Export implements OTLP's gRPC trace service.
func (c *Collector) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	if c.refuse.Load() {
		c.refused.Add(1)
		return nil, status.Error(codes.PermissionDenied, "otlptest: refusing every export")
	}
	c.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP implements OTLP/HTTP's POST /v1/traces in protobuf.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.refuse.Load() {
		c.refused.Add(1)
		http.Error(w, "otlptest: refusing every export", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces in application/x-protobuf", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(&req)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (c *Collector) add(req *collectorpb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Span: sp, Resource: res})
			}
		}
	}
}

// attrs flattens OTLP attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		}
	}
	return m
}
