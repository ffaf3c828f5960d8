package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestOverrideOverflow: a limit override whose period overflows a
// Duration, or passes the longest period, is refused as the request's
// fault, with the product in the message, never enforced as another
// period.
func TestOverrideOverflow(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	for _, tc := range []struct {
		unit typev3.RateLimitUnit
		mult uint32
	}{
		{typev3.RateLimitUnit_YEAR, 1017872924}, // wraps to about 166 s
		{typev3.RateLimitUnit_YEAR, 293},        // just past int64 nanoseconds
		{typev3.RateLimitUnit_YEAR, 11},         // past the longest period
		{typev3.RateLimitUnit_SECOND, 1<<32 - 1},
	} {
		d := desc("user", "a")
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: tc.unit, UnitMultiplier: wrapperspb.UInt32(tc.mult)}
		_, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
		if !errors.Is(err, errInvalidRequest) || !strings.Contains(err.Error(), "longer than 10 years") {
			t.Errorf("override of 10 per %d × %s: %v, want an invalid request past 10 years", tc.mult, tc.unit, err)
		}
	}
	// Ten years exactly is a period a limit may have.
	d := desc("user", "b")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(10)}
	if _, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}); err != nil {
		t.Errorf("override of 10 per 10 years: %v", err)
	}
}

// startGRPC serves svc over gRPC with GRPCOptions on a loopback port.
func startGRPC(t *testing.T, svc *Service, log *slog.Logger, m *Metrics) *grpc.ClientConn {
	t.Helper()
	return startGRPCWith(t, svc, nil, GRPCOptions(log, m)...)
}

// startGRPCWith is startGRPC with more services, which also registers.
func startGRPCWith(t *testing.T, svc *Service, also func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	RegisterGRPC(g, svc)
	if also != nil {
		also(g)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawCodec sends bytes as they are, to put invalid UTF-8 on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// TestGRPCInvalidUTF8: a request with a string of invalid UTF-8 is the
// client's fault, INVALID_ARGUMENT, not INTERNAL; a valid one after it on
// the same connection is answered.
func TestGRPCInvalidUTF8(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	conn := startGRPC(t, svc, slog.New(slog.DiscardHandler), nil)
	// RateLimitRequest{domain: "test", descriptors: [{entries: [{key: "user", value: "a\xff"}]}]}
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "user")
	entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), "a\xff")
	descriptor := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "test")
	req = protowire.AppendBytes(protowire.AppendTag(req, 2, protowire.BytesType), descriptor)
	var resp rlsv3.RateLimitResponse
	err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", req, &resp,
		grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("invalid UTF-8: %v, want INVALID_ARGUMENT naming UTF-8", err)
	}
	ok, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
	if err != nil || ok.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a valid request after it: %v, %v", ok, err)
	}
}

// panicStore panics in every decision, as a bug would.
type panicStore struct{ *memstore.Store }

func (panicStore) Decide(context.Context, string, *driver.ValidSpec, int64) (driver.Decision, error) {
	panic("a bug")
}

func (panicStore) DecideAll(context.Context, []driver.Request) ([]driver.Decision, error) {
	panic("a bug")
}

// TestPanicRecovered: a panic in a handler answers INTERNAL (gRPC) or
// 500 (HTTP), is logged with its stack and counted, and the process and
// the server go on.
func TestPanicRecovered(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	svc := newService(t, panicStore{memstore.New()}, testConfig, Options{Metrics: m, Logger: log})

	conn := startGRPC(t, svc, log, m)
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "a bug") {
		t.Fatalf("gRPC after a panic: %v, want INTERNAL without the panic's text", err)
	}

	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/json", "application/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("HTTP after a panic: %s", resp.Status)
	}
	if got := testutil.ToFloat64(m.panics); got != 2 {
		t.Errorf("panics counted: %v, want 2", got)
	}
	if !strings.Contains(logs.String(), "panic in a handler") || !strings.Contains(logs.String(), "goroutine") {
		t.Errorf("the log lacks the panic and its stack:\n%s", logs.String())
	}
	// The server goes on.
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(),
		&rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}}); err != nil {
		t.Errorf("after the panics: %v", err)
	}
}

// TestStoreErrorHidden: a caller learns that the store failed, not
// Redis's address nor the key; the log keeps them.
func TestStoreErrorHidden(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	var logs bytes.Buffer
	// go-redis's dial retries outlast the default StoreTimeout, which
	// would leave only "context deadline exceeded" to log.
	svc := newService(t, redisstore.New(dead), testConfig, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), StoreTimeout: 5 * time.Second})
	req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "secret-user")}}
	_, err := svc.Decide(context.Background(), req)
	if !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("Decide: %v, want ErrStoreUnavailable", err)
	}
	conn := startGRPC(t, svc, nil, nil)
	_, gerr := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req)
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	defer srv.Close()
	var bodies []string
	for _, path := range []string{"/json", "/v1/decide"} {
		resp, err := http.Post(srv.URL+path, "application/json",
			strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"secret-user"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, path+": "+resp.Status+" "+string(b))
	}
	for _, answer := range append(bodies, "gRPC: "+gerr.Error()) {
		if strings.Contains(answer, "127.0.0.1:1") || strings.Contains(answer, "secret-user") || strings.Contains(answer, "connect") {
			t.Errorf("the answer tells the store's detail: %s", answer)
		}
		if !strings.Contains(answer, ErrStoreUnavailable.Error()) {
			t.Errorf("the answer does not say the store is unavailable: %s", answer)
		}
	}
	if !strings.Contains(logs.String(), "127.0.0.1:1") {
		t.Errorf("the log lacks the store's error:\n%s", logs.String())
	}
}

// TestDecideStrictJSON: /v1/decide refuses what /json refuses, rather
// than guessing: a key twice (the last would win), data after the value,
// invalid UTF-8 and unpaired surrogates (both rewritten to U+FFFD, so
// that two values would share one counter).
func TestDecideStrictJSON(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	defer srv.Close()
	post := func(path, body string) int {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	entry := func(value string) string {
		return `{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"` + value + `"}]}]}`
	}
	for _, body := range []string{
		`{"domain":"other","domain":"test","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`,
		`{"domain":"test","descriptors":[{"entries":[{"key":"user","key":"x","value":"a"}]}]}`,
		entry("a") + `{}`,
		entry("a") + ` x`,
		entry("a\xff"),
		entry(`a\ud800`),
		entry(`a\udc00b`),
		entry(`a\ud800\u0041`),
	} {
		for _, path := range []string{"/v1/decide", "/json"} {
			if code := post(path, body); code != http.StatusBadRequest {
				t.Errorf("%s %q: %d, want 400", path, body, code)
			}
		}
	}
	for _, body := range []string{entry("a"), entry(`\ud83d\ude00`), entry(`\\ud800`), entry("\u00e9")} {
		for _, path := range []string{"/v1/decide", "/json"} {
			if code := post(path, body); code != http.StatusOK {
				t.Errorf("%s %q: %d, want 200", path, body, code)
			}
		}
	}
}
