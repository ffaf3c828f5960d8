package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestMain says how many tests skipped for want of Redis.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// testServer is grpc-go's interop test service: UnaryCall answers with the
// call's rate limit key in Username, after running unary if set;
// StreamingInputCall counts the messages it receives.
type testServer struct {
	testgrpc.UnimplementedTestServiceServer
	mu    sync.Mutex
	unary func(ctx context.Context) error
}

// setUnary sets what UnaryCall runs, between calls.
func (s *testServer) setUnary(f func(ctx context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unary = f
}

func (s *testServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	key, _ := grpclimit.KeyFromContext(ctx)
	s.mu.Lock()
	f := s.unary
	s.mu.Unlock()
	if f != nil {
		if err := f(ctx); err != nil {
			return nil, err
		}
	}
	return &testgrpc.SimpleResponse{Username: key}, nil
}

func (s *testServer) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	n := int32(0)
	for {
		_, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n++
	}
}

// serve starts a grpc-go server of srv with opts on a loopback port, and
// returns a client of it; both end with t.
func serve(t testing.TB, srv *testServer, opts []grpc.ServerOption, dial ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, srv)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// interceptors are the server options of both interceptors of lim.
func interceptors(lim *ratekeeper.Limiter, opts ...grpclimit.Option) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim, opts...)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim, opts...)),
	}
}

// stores runs test against memstore and against the test Redis, each
// store reading a clock stopped at start, so that every time is exact.
func stores(t *testing.T, test func(t *testing.T, store ratekeeper.Store)) {
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		s := memstore.New(memstore.WithClock(now))
		t.Cleanup(func() { s.Close() })
		test(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		test(t, redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(now)))
	})
}

func newLimiter(t testing.TB, s ratekeeper.Store, p ratekeeper.Policy, opts ...ratekeeper.Option) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func unary(ctx context.Context, c testgrpc.TestServiceClient, opts ...grpc.CallOption) (string, error) {
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, opts...)
	return resp.GetUsername(), err
}

// details returns the RetryInfo and QuotaFailure of err's status.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st := status.Convert(err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if ri == nil || qf == nil {
		t.Fatalf("status %v: RetryInfo %v, QuotaFailure %v", st, ri, qf)
	}
	return ri, qf
}

func TestUnaryServerInterceptor(t *testing.T) {
	stores(t, func(t *testing.T, store ratekeeper.Store) {
		// 2 per 10 s: the third call waits 5 s for the next.
		lim := newLimiter(t, store, ratekeeper.GCRA{Rate: 2, Period: 10 * time.Second, Burst: 2}, ratekeeper.WithName("api"))
		c := serve(t, &testServer{}, interceptors(lim))
		ctx := context.Background()
		for i := range 2 {
			var header metadata.MD
			key, err := unary(ctx, c, grpc.Header(&header))
			if err != nil || key != "ip:127.0.0.1" {
				t.Fatalf("call %d: key %q, %v", i, key, err)
			}
			if got, want := header.Get("ratelimit-policy"), []string{`"api";q=2;w=10`}; !equal(got, want) {
				t.Errorf("call %d: ratelimit-policy %q, want %q", i, got, want)
			}
			if got := header.Get("ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"api";r=`+string(rune('1'-i))+";t=") {
				t.Errorf("call %d: ratelimit %q", i, got)
			}
		}
		var header, trailer metadata.MD
		_, err := unary(ctx, c, grpc.Header(&header), grpc.Trailer(&trailer))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("third call: %v, want ResourceExhausted", err)
		}
		ri, qf := details(t, err)
		if got := ri.GetRetryDelay().AsDuration(); got != 5*time.Second {
			t.Errorf("RetryInfo %v, want exactly 5s", got)
		}
		if len(qf.Violations) != 1 || qf.Violations[0].Subject != "ip:127.0.0.1" || !strings.HasPrefix(qf.Violations[0].Description, "api: 2 per 10s") {
			t.Errorf("QuotaFailure %v", qf)
		}
		if got := trailer.Get("grpc-retry-pushback-ms"); !equal(got, []string{"5000"}) {
			t.Errorf("grpc-retry-pushback-ms %q, want 5000", got)
		}
		if got := trailer.Get("retry-after"); !equal(got, []string{"5"}) {
			t.Errorf("retry-after %q, want 5", got)
		}
		if got := trailer.Get("ratelimit"); !equal(got, []string{`"api";r=0;t=5`}) {
			t.Errorf("denied: ratelimit %q", got)
		}
		if got := trailer.Get("ratelimit-policy"); !equal(got, []string{`"api";q=2;w=10`}) {
			t.Errorf("denied: ratelimit-policy %q", got)
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAll: a limiter of several policies lists each, and its
// QuotaFailure names the policies that denied.
func TestAll(t *testing.T) {
	stores(t, func(t *testing.T, store ratekeeper.Store) {
		lim := newLimiter(t, store, ratekeeper.All(
			ratekeeper.Named("burst", ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1}),
			ratekeeper.Named("daily", ratekeeper.FixedWindow{Limit: 100, Window: 24 * time.Hour})))
		c := serve(t, &testServer{}, interceptors(lim))
		var header metadata.MD
		if _, err := unary(context.Background(), c, grpc.Header(&header)); err != nil {
			t.Fatal(err)
		}
		if got, want := header.Get("ratelimit-policy"), []string{`"burst";q=1;w=1, "daily";q=100;w=86400`}; !equal(got, want) {
			t.Errorf("ratelimit-policy %q, want %q", got, want)
		}
		_, err := unary(context.Background(), c)
		_, qf := details(t, err)
		if len(qf.Violations) != 1 || !strings.HasPrefix(qf.Violations[0].Description, "burst:") {
			t.Errorf("QuotaFailure %v, want burst alone", qf)
		}
	})
}

func TestKeys(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, memstore.New(), ratekeeper.FixedWindow{Limit: 100, Window: time.Hour})
	xff := metadata.Pairs("x-forwarded-for", "198.51.100.1, 203.0.113.9", "x-api-key", "k1")
	tests := []struct {
		name string
		key  grpclimit.KeyFunc
		md   metadata.MD
		want string
		code codes.Code
	}{
		{"peer", nil, xff, "ip:127.0.0.1", codes.OK},
		{"untrusted peer: x-forwarded-for ignored", grpclimit.ClientIP("10.0.0.0/8"), xff, "ip:127.0.0.1", codes.OK},
		{"trusted peer: rightmost untrusted", grpclimit.ClientIP("127.0.0.1"), xff, "ip:203.0.113.9", codes.OK},
		{"trusted peer and proxy", grpclimit.ClientIP("127.0.0.0/8", "203.0.113.0/24"), xff, "ip:198.51.100.1", codes.OK},
		{"trusted peer: garbage", grpclimit.ClientIP("127.0.0.1"), metadata.Pairs("x-forwarded-for", "unknown"), "", codes.InvalidArgument},
		{"metadata", grpclimit.MetadataKey("X-API-Key"), xff, "x-api-key:k1", codes.OK},
		{"metadata missing", grpclimit.MetadataKey("x-api-key"), nil, "", codes.InvalidArgument},
		{"full method", grpclimit.FullMethod(), nil, "/grpc.testing.TestService/UnaryCall", codes.OK},
		{"per method", grpclimit.PerMethod(nil), nil, "/grpc.testing.TestService/UnaryCall ip:127.0.0.1", codes.OK},
		{"own status kept", func(context.Context, string) (string, error) {
			return "", status.Error(codes.Unauthenticated, "sign in")
		}, nil, "", codes.Unauthenticated},
		{"empty key", func(context.Context, string) (string, error) { return "", nil }, nil, "", codes.InvalidArgument},
		{"key too long", func(context.Context, string) (string, error) {
			return strings.Repeat("k", ratekeeper.MaxKeyLen+1), nil
		}, nil, "", codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := serve(t, &testServer{}, interceptors(lim, grpclimit.WithKeyFunc(tt.key), grpclimit.FailClosed))
			ctx := metadata.NewOutgoingContext(context.Background(), tt.md)
			got, err := unary(ctx, c)
			if status.Code(err) != tt.code || got != tt.want {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tt.want, tt.code)
			}
		})
	}
	if _, err := grpclimit.NewClientIP(grpclimit.ClientIPConfig{TrustedProxies: []string{"10.0.0.0/33"}}); err == nil {
		t.Error("NewClientIP with an invalid CIDR: nil error")
	}
	if _, err := grpclimit.NewClientIP(grpclimit.ClientIPConfig{Metadata: "x forwarded"}); err == nil {
		t.Error("NewClientIP with an invalid metadata key: nil error")
	}
}

// TestLimiters: each method gets the limiter that WithMethodLimiters or
// WithLimiterFunc chooses, the others the interceptor's.
func TestLimiters(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	def := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 1, Window: time.Hour}, ratekeeper.WithName("default"))
	strict := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}, ratekeeper.WithName("unary"))
	for name, opt := range map[string]grpclimit.Option{
		"map": grpclimit.WithMethodLimiters(map[string]*ratekeeper.Limiter{"/grpc.testing.TestService/UnaryCall": strict}),
		"func": grpclimit.WithLimiterFunc(func(_ context.Context, method string) *ratekeeper.Limiter {
			if method == "/grpc.testing.TestService/UnaryCall" {
				return strict
			}
			return nil
		}),
	} {
		t.Run(name, func(t *testing.T) {
			c := serve(t, &testServer{}, interceptors(def, opt, grpclimit.WithKeyFunc(grpclimit.MetadataKey("k"))))
			ctx := metadata.AppendToOutgoingContext(context.Background(), "k", name)
			for i := range 4 {
				var header, trailer metadata.MD
				_, err := unary(ctx, c, grpc.Header(&header), grpc.Trailer(&trailer))
				if (err == nil) != (i < 3) {
					t.Fatalf("unary call %d: %v", i, err)
				}
				if got := append(header.Get("ratelimit-policy"), trailer.Get("ratelimit-policy")...); !equal(got, []string{`"unary";q=3;w=3600`}) {
					t.Errorf("unary call %d: ratelimit-policy %q", i, got)
				}
			}
			for i := range 2 {
				s, err := c.StreamingInputCall(ctx)
				if err == nil {
					_, err = s.CloseAndRecv()
				}
				if (err == nil) != (i < 1) {
					t.Fatalf("stream %d: %v", i, err)
				}
			}
		})
	}
}

func TestStream(t *testing.T) {
	stores(t, func(t *testing.T, store ratekeeper.Store) {
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 5, Window: time.Hour})
		c := serve(t, &testServer{}, interceptors(lim, grpclimit.WithMessageCost(func(any) int64 { return 1 })))
		ctx := context.Background()
		// The start takes 1, and three messages 3: 4 of 5.
		s, err := c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := s.Send(&testgrpc.StreamingInputCallRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := s.CloseAndRecv()
		if err != nil || resp.GetAggregatedPayloadSize() != 3 {
			t.Fatalf("first stream: %v, %v", resp, err)
		}
		header, _ := s.Header()
		if got := header.Get("ratelimit"); !equal(got, []string{`"fixed_window";r=4;t=3600`}) {
			t.Errorf("ratelimit %q", got)
		}
		// The start takes the last; its first message is denied.
		s, err = c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&testgrpc.StreamingInputCallRequest{})
		_, err = s.CloseAndRecv()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("second stream: %v, want ResourceExhausted", err)
		}
		if ri, _ := details(t, err); ri.GetRetryDelay().AsDuration() != time.Hour {
			t.Errorf("RetryInfo %v, want 1h", ri.GetRetryDelay().AsDuration())
		}
		if got := s.Trailer().Get("grpc-retry-pushback-ms"); !equal(got, []string{"3600000"}) {
			t.Errorf("grpc-retry-pushback-ms %q", got)
		}
		// No start at all now.
		s, err = c.StreamingInputCall(ctx)
		if err == nil {
			_, err = s.CloseAndRecv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("third stream: %v, want ResourceExhausted", err)
		}
	})
}

// TestChargeRefund: a handler charges a cost learnt while serving, and
// refunds, on the key it was admitted under; WithRefundOn refunds the
// calls that end with the codes it names.
func TestChargeRefund(t *testing.T) {
	stores(t, func(t *testing.T, store ratekeeper.Store) {
		lim := newLimiter(t, store, ratekeeper.FixedWindow{Limit: 10, Window: time.Hour})
		srv := &testServer{}
		c := serve(t, srv, interceptors(lim, grpclimit.WithRefundOn(codes.Internal)))
		ctx := context.Background()
		remaining := func() float64 {
			res, err := lim.Peek(ctx, "ip:127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			return res.Remaining
		}
		srv.setUnary(func(ctx context.Context) error {
			if _, err := grpclimit.Charge(ctx, 4); err != nil {
				return err
			}
			_, err := grpclimit.Refund(ctx, 1)
			return err
		})
		if _, err := unary(ctx, c); err != nil {
			t.Fatal(err)
		}
		if got := remaining(); got != 10-1-4+1 {
			t.Errorf("after charge and refund: remaining %v, want 6", got)
		}
		srv.setUnary(func(context.Context) error { return status.Error(codes.Internal, "boom") })
		if _, err := unary(ctx, c); status.Code(err) != codes.Internal {
			t.Fatal(err)
		}
		if got := remaining(); got != 6 {
			t.Errorf("after a call ending Internal: remaining %v, want 6", got)
		}
		srv.setUnary(func(context.Context) error { return status.Error(codes.NotFound, "none") })
		unary(ctx, c)
		if got := remaining(); got != 5 {
			t.Errorf("after a call ending NotFound: remaining %v, want 5", got)
		}
	})
	if _, err := grpclimit.Charge(context.Background(), 1); !errors.Is(err, grpclimit.ErrNoDecision) {
		t.Errorf("Charge outside a call: %v, want ErrNoDecision", err)
	}
}

// TestExempt: exempt calls are served without a decision or fields.
func TestExempt(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, memstore.New(), ratekeeper.FixedWindow{Limit: 1, Window: time.Hour})
	c := serve(t, &testServer{}, interceptors(lim, grpclimit.WithExempt(func(_ context.Context, m string) bool {
		return strings.HasSuffix(m, "/UnaryCall")
	})))
	for range 3 {
		var header metadata.MD
		if key, err := unary(context.Background(), c, grpc.Header(&header)); err != nil || key != "" || header.Get("ratelimit") != nil {
			t.Fatalf("exempt call: key %q, %v, header %v", key, err, header)
		}
	}
}

// failingLimiter is a limiter over a real Redis client that cannot reach
// a Redis: addr refuses connections, or accepts them and never answers.
func failingLimiter(t *testing.T, hang bool) *ratekeeper.Limiter {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if hang {
		t.Cleanup(func() { lis.Close() })
		go func() {
			for {
				conn, err := lis.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { conn.Close() })
			}
		}()
	} else {
		lis.Close()
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	return newLimiter(t, redisstore.New(client), ratekeeper.FixedWindow{Limit: 1, Window: time.Hour})
}

// TestStreamRefundOn: a stream that its handler ends with a code of
// WithRefundOn gives its cost back; other streams keep it.
func TestStreamRefundOn(t *testing.T) {
	t.Parallel()
	lim := newLimiter(t, memstore.New(), ratekeeper.FixedWindow{Limit: 10, Window: time.Hour})
	c := serve(t, &testServer{}, interceptors(lim, grpclimit.WithRefundOn(codes.OK),
		grpclimit.WithCostFunc(func(context.Context, string) (int64, error) { return 3, nil })))
	ctx := context.Background()
	s, err := c.StreamingInputCall(ctx)
	if err == nil {
		_, err = s.CloseAndRecv()
	}
	if err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Peek(ctx, "ip:127.0.0.1"); err != nil || res.Remaining != 10 {
		t.Errorf("after a stream ending OK: %+v, %v; want its 3 refunded", res, err)
	}
	if _, err := unary(ctx, c); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Peek(ctx, "ip:127.0.0.1"); err != nil || res.Remaining != 10 {
		t.Errorf("after a unary call ending OK: %+v, %v; want its 3 refunded", res, err)
	}
}
