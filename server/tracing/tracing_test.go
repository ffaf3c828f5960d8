package tracing_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/config"
	"github.com/ratekeeper/ratekeeper/server/internal/otlptest"
	"github.com/ratekeeper/ratekeeper/server/tracing"
)

const testConfig = `
domain: traced
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// The caller's trace context: W3C traceparent, sampled or not.
const (
	callerTrace     = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan      = "00f067aa0ba902b7"
	sampledParent   = "00-" + callerTrace + "-" + callerSpan + "-01"
	unsampledParent = "00-" + callerTrace + "-" + callerSpan + "-00"
)

const shouldRateLimit = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// service is a traced ratekeeper-server on loopback: its gRPC client and
// its HTTP address.
type service struct {
	tracer *tracing.Tracer
	rls    rlsv3.RateLimitServiceClient
	http   string
}

// startService runs the service traced as cfg says, exporting to the
// collector at endpoint, until the test ends.
func startService(t *testing.T, endpoint string, cfg tracing.Config) *service {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	tr, err := tracing.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })

	path := filepath.Join(t.TempDir(), "traced.yaml")
	if err := os.WriteFile(path, []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	svc := server.New(tr.Store(st), server.Options{})
	if err := svc.SetConfig(c); err != nil {
		t.Fatal(err)
	}

	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(tr.ServerOption())
	server.RegisterGRPC(g, svc)
	go g.Serve(gln)
	t.Cleanup(g.Stop)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &http.Server{Handler: tr.HTTPHandler(server.HTTPHandler(svc, nil, http.NotFoundHandler()))}
	go h.Serve(hln)
	t.Cleanup(func() { h.Close() })

	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &service{tracer: tr, rls: rlsv3.NewRateLimitServiceClient(conn), http: hln.Addr().String()}
}

// call asks ShouldRateLimit for user and path, with traceparent in the
// metadata unless it is empty.
func (s *service) call(t *testing.T, traceparent, user string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if traceparent != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent)
	}
	resp, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "traced",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// flush exports every span ended so far: the collector has them on return.
func (s *service) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.tracer.ForceFlush(ctx); err != nil {
		t.Fatalf("flushing spans: %v", err)
	}
}

func TestShouldRateLimitSpans(t *testing.T) {
	for _, protocol := range []string{"http", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			col := otlptest.Start(t, protocol)
			svc := startService(t, col.Endpoint, tracing.Config{
				Protocol: protocol, ServiceName: "rk-test", ServiceNamespace: "ns", ServiceInstanceID: "pod-1", SamplingRate: 1,
			})
			if got := svc.call(t, sampledParent, "alice").GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("first call: %v, want OK", got)
			}
			if got := svc.call(t, sampledParent, "alice").GetOverallCode(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("second call: %v, want OVER_LIMIT", got)
			}
			svc.flush(t)

			spans := col.Spans()
			calls := col.Named(shouldRateLimit)
			if len(calls) != 2 {
				t.Fatalf("%d %s spans, want 2 (received: %v)", len(calls), shouldRateLimit, spans)
			}
			for i, want := range []string{"OK", "OVER_LIMIT"} {
				c := calls[i]
				if c.TraceID() != callerTrace || c.ParentID() != callerSpan {
					t.Errorf("call %d: trace %s parent %s, want the caller's %s and %s", i, c.TraceID(), c.ParentID(), callerTrace, callerSpan)
				}
				if c.Kind != tracepb.Span_SPAN_KIND_SERVER {
					t.Errorf("call %d: kind %v, want server", i, c.Kind)
				}
				for k, v := range map[string]string{
					"ratelimit.domain": "traced", "ratelimit.descriptors": "2", "ratelimit.overall_code": want,
					"rpc.system": "grpc", "rpc.service": "envoy.service.ratelimit.v3.RateLimitService",
					"rpc.method": "ShouldRateLimit", "rpc.grpc.status_code": "0",
				} {
					if got := c.Attr(k); got != v {
						t.Errorf("call %d: %s = %q, want %q", i, k, got, v)
					}
				}
				for k, v := range map[string]string{"service.name": "rk-test", "service.namespace": "ns", "service.instance.id": "pod-1"} {
					if got := c.Resource[k]; got != v {
						t.Errorf("resource %s = %q, want %q", k, got, v)
					}
				}
				var children []otlptest.Span
				for _, s := range spans {
					if s.ParentID() == c.SpanID() {
						children = append(children, s)
					}
				}
				if len(children) != 1 || children[0].Name != "ratekeeper.Store/DecideAll" || children[0].TraceID() != callerTrace {
					t.Fatalf("call %d: children %v, want one ratekeeper.Store/DecideAll in trace %s", i, children, callerTrace)
				}
				if got := children[0].Attr("ratekeeper.requests"); got != "2" {
					t.Errorf("call %d: the store span's ratekeeper.requests = %q, want 2", i, got)
				}
			}
			if len(spans) != 4 {
				t.Errorf("%d spans, want 4: two calls and their store calls", len(spans))
			}
		})
	}
}

// The caller's decision to sample, or not, is followed; without one the
// sampling rate decides.
func TestSampling(t *testing.T) {
	col := otlptest.Start(t, "http")
	svc := startService(t, col.Endpoint, tracing.Config{SamplingRate: 0})
	svc.call(t, "", "a")
	svc.call(t, unsampledParent, "b")
	svc.flush(t)
	if spans := col.Spans(); len(spans) != 0 {
		t.Fatalf("%d spans exported at a sampling rate of 0, want none: %v", len(spans), spans)
	}
	svc.call(t, sampledParent, "c")
	svc.flush(t)
	calls := col.Named(shouldRateLimit)
	if len(calls) != 1 || calls[0].TraceID() != callerTrace {
		t.Fatalf("a sampled caller: %v, want one span in its trace", calls)
	}
	if got := calls[0].Resource["service.name"]; got != tracing.DefaultServiceName {
		t.Errorf("service.name = %q, want the default %q", got, tracing.DefaultServiceName)
	}
	if got := calls[0].Resource["service.instance.id"]; len(got) != 36 {
		t.Errorf("service.instance.id = %q, want a random UUID", got)
	}
}

func TestJSONSpans(t *testing.T) {
	col := otlptest.Start(t, "grpc")
	svc := startService(t, col.Endpoint, tracing.Config{Protocol: "grpc", SamplingRate: 1})
	body := `{"domain":"traced","descriptors":[{"entries":[{"key":"path","value":"/"}]}]}`
	req, err := http.NewRequest(http.MethodPost, "http://"+svc.http+"/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", sampledParent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /json: %s", resp.Status)
	}
	hc, err := http.Get("http://" + svc.http + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	hc.Body.Close()
	svc.flush(t)
	spans := col.Spans()
	calls := col.Named("POST /json")
	if len(calls) != 1 || len(spans) != 2 {
		t.Fatalf("spans %v, want POST /json and its store call (and no span for /healthcheck)", spans)
	}
	c := calls[0]
	if c.TraceID() != callerTrace || c.ParentID() != callerSpan || c.Attr("http.response.status_code") != "200" {
		t.Errorf("POST /json: trace %s parent %s status %s, want %s %s 200", c.TraceID(), c.ParentID(), c.Attr("http.response.status_code"), callerTrace, callerSpan)
	}
	for _, s := range spans {
		if s.Name == "ratekeeper.Store/Decide" && s.ParentID() != c.SpanID() {
			t.Errorf("the store span's parent is %s, want POST /json's %s", s.ParentID(), c.SpanID())
		}
	}
}

func TestBadConfig(t *testing.T) {
	_, err := tracing.New(context.Background(), tracing.Config{Protocol: "udp"})
	if err == nil || !strings.Contains(err.Error(), `"udp"`) {
		t.Fatalf("protocol udp: %v, want an error naming it", err)
	}
}

// plainStore is a server.Store and nothing more: the interface hides
// the optional methods of the store in it.
type plainStore struct{ server.Store }

// The traced store is a driver.Charger exactly when its store is, and
// traces charges and refunds.
func TestStoreCharger(t *testing.T) {
	col := otlptest.Start(t, "http")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint)
	tr, err := tracing.New(context.Background(), tracing.Config{SamplingRate: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	st := memstore.New()
	defer st.Close()
	if _, ok := tr.Store(plainStore{st}).(driver.Charger); ok {
		t.Error("the traced store of a store that is not a driver.Charger is one")
	}
	c, ok := tr.Store(st).(driver.Charger)
	if !ok {
		t.Fatal("the traced memstore is not a driver.Charger; memstore is")
	}
	lim, err := ratekeeper.New(st, ratekeeper.FixedWindow{Limit: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(context.Background(), "k", lim.Spec(), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refund(context.Background(), "k", lim.Spec(), 1); err != nil {
		t.Fatal(err)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ratekeeper.Store/Charge", "ratekeeper.Store/Refund"} {
		if got := col.Named(name); len(got) != 1 || got[0].Attr("ratekeeper.denied") != "0" {
			t.Errorf("%s spans: %v, want one that denied none", name, got)
		}
	}
}
