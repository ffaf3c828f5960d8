package xds_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/config"
	"github.com/ratekeeper/ratekeeper/server/internal/certs"
	"github.com/ratekeeper/ratekeeper/server/internal/quota"
	"github.com/ratekeeper/ratekeeper/server/internal/xdstest"
	"github.com/ratekeeper/ratekeeper/server/xds"
)

const node = "envoy-ratelimit"

// wait bounds every wait for the client: far above what a push takes.
const wait = 10 * time.Second

// fastBackoff retries a lost stream within a tenth of a second.
var fastBackoff = xds.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Factor: 2}

// domain is a RateLimitConfig of one domain whose descriptor key allows
// rpu requests a minute.
func domain(name, key string, rpu uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: rpu}},
	}}
}

// harness is a service configured over xDS, with mTLS.
type harness struct {
	srv      *xdstest.Server
	proxy    *xdstest.Proxy // between the client and srv, if asked for
	svc      *server.Service
	client   *xds.Client
	rejected atomic.Int64
}

func start(t *testing.T, opts xds.Options) *harness { return startVia(t, opts, false) }

// startVia is start, through an xdstest.Proxy if proxied.
func startVia(t *testing.T, opts xds.Options, proxied bool) *harness {
	t.Helper()
	pki := xdstest.NewPKI(t)
	h := &harness{srv: xdstest.Start(t, pki.ServerTLS(t)), svc: server.New(memstore.New(), server.Options{})}
	tlsFn, err := xds.TLSFiles(pki.ClientCert, pki.ClientKey, pki.CA, xdstest.ServerName, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Server, opts.NodeID, opts.TLS = h.srv.Addr, node, tlsFn
	if proxied {
		h.proxy = xdstest.NewProxy(t, h.srv.Addr)
		opts.Server = h.proxy.Addr
	}
	if opts.Backoff == (xds.Backoff{}) {
		opts.Backoff = fastBackoff
	}
	opts.Apply = h.svc.SetConfig
	opts.Rejected = func(error) { h.rejected.Add(1) }
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	c, err := xds.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// waitVersion waits until the client has applied version, and returns
// how long that took.
func (h *harness) waitVersion(t *testing.T, version string) time.Duration {
	t.Helper()
	start := time.Now()
	for h.client.Version() != version {
		if time.Since(start) > wait {
			t.Fatalf("version %q not applied within %v (at %q)", version, wait, h.client.Version())
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// decide asks the service about one descriptor of domain.
func (h *harness) decide(t *testing.T, dom, key string) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	resp, err := h.svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: dom, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "v"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// testLogger logs to t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestInitialAndUpdates checks that the first snapshot and each update
// are applied and ACKed, as the node the options name, and measures the
// time from SetSnapshot to a push applied.
func TestInitialAndUpdates(t *testing.T) {
	h := start(t, xds.Options{NodeMetadata: map[string]string{"cluster": "edge", "zone": "a=b"}})
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	select {
	case <-h.client.Received():
	case <-time.After(wait):
		t.Fatal("no first push")
	}
	h.waitVersion(t, "1")
	first := h.srv.Requests()[0]
	if first.GetNode().GetId() != node || first.GetTypeUrl() != xds.TypeURL {
		t.Errorf("first request: node %q, type %q", first.GetNode().GetId(), first.GetTypeUrl())
	}
	md := first.GetNode().GetMetadata().GetFields()
	if md["cluster"].GetStringValue() != "edge" || md["zone"].GetStringValue() != "a=b" {
		t.Errorf("node metadata %v", md)
	}
	if h.srv.WaitRequest(wait, xdstest.IsACK("1")) == nil {
		t.Fatal("version 1 not ACKed")
	}
	for i := range 3 {
		if code, _ := h.decide(t, "basic", "key1"); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i+1, code)
		}
	}
	if code, _ := h.decide(t, "basic", "key1"); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request 4: %v", code)
	}

	// Updates: each a new limit and a new domain.
	var took []time.Duration
	for v := 2; v <= 21; v++ {
		version := strconv.Itoa(v)
		start := time.Now()
		h.srv.Set(node, version, domain("basic", "key1", uint32(100+v)), domain("reload", "key2", 1))
		h.waitVersion(t, version)
		took = append(took, time.Since(start))
		if _, rpu := h.decide(t, "basic", "key1"); rpu != uint32(100+v) {
			t.Fatalf("version %s: limit %d, want %d", version, rpu, 100+v)
		}
	}
	if code, _ := h.decide(t, "reload", "key2"); code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("new domain: %v", code)
	}
	if h.srv.WaitRequest(wait, xdstest.IsACK("21")) == nil {
		t.Fatal("version 21 not ACKed")
	}
	slices.Sort(took)
	t.Logf("time to apply a push (SetSnapshot to the service deciding with it, mTLS, %d pushes): median %v, max %v",
		len(took), took[len(took)/2], took[len(took)-1])
	if n := h.rejected.Load(); n != 0 {
		t.Errorf("%d pushes rejected", n)
	}
}

// TestInvalidPush checks that an invalid push is NACKed with the error,
// reported once although the server sends it again, that the previous
// configuration keeps answering, and that a valid push after it applies.
func TestInvalidPush(t *testing.T) {
	t.Parallel()
	h := start(t, xds.Options{})
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	h.waitVersion(t, "1")
	bad := domain("basic", "key1", 5)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	h.srv.Set(node, "2", bad)
	nack := h.srv.WaitRequest(wait, xdstest.IsNACK)
	if nack == nil {
		t.Fatal("no NACK")
	}
	msg := nack.GetErrorDetail().GetMessage()
	if want := `RateLimitConfig "basic": descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`; !strings.Contains(msg, want) {
		t.Errorf("NACK message %q, want it to hold %q", msg, want)
	}
	if nack.GetVersionInfo() != "1" {
		t.Errorf("NACK version %q, want the version applied, 1", nack.GetVersionInfo())
	}
	if _, rpu := h.decide(t, "basic", "key1"); rpu != 3 {
		t.Errorf("after the NACK: limit %d, want version 1's 3", rpu)
	}
	// The snapshot cache answers a NACK with the same snapshot: the client
	// refuses it again, paced, and counts it once.
	time.Sleep(2500 * time.Millisecond)
	nacks := 0
	for _, r := range h.srv.Requests() {
		if xdstest.IsNACK(r) {
			nacks++
		}
	}
	if nacks < 2 || nacks > 5 {
		t.Errorf("%d NACKs in 2.5 s, want the repeated push refused about once a second", nacks)
	}
	if n := h.rejected.Load(); n != 1 {
		t.Errorf("rejected reported %d times, want 1", n)
	}
	if h.client.Version() != "1" {
		t.Errorf("version %q", h.client.Version())
	}
	h.srv.Set(node, "3", domain("basic", "key1", 7))
	h.waitVersion(t, "3")
	if _, rpu := h.decide(t, "basic", "key1"); rpu != 7 {
		t.Errorf("after a valid push: limit %d, want 7", rpu)
	}
}

// TestServerGoneAndBack checks that the last configuration keeps serving
// while the server is away, and that the client takes the server's
// snapshot once it is back; it measures the time from the server
// listening again to the new snapshot applied.
func TestServerGoneAndBack(t *testing.T) {
	t.Parallel()
	h := start(t, xds.Options{})
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	h.waitVersion(t, "1")
	var took []time.Duration
	for i := 2; i <= 6; i++ {
		h.srv.Stop()
		time.Sleep(300 * time.Millisecond) // a few failed attempts
		if _, rpu := h.decide(t, "basic", "key1"); rpu == 0 {
			t.Fatal("no limit while the server is away")
		}
		version := strconv.Itoa(i)
		h.srv.Set(node, version, domain("basic", "key1", uint32(10+i)))
		start := time.Now()
		h.srv.Restart()
		h.waitVersion(t, version)
		took = append(took, time.Since(start))
		if _, rpu := h.decide(t, "basic", "key1"); rpu != uint32(10+i) {
			t.Fatalf("after restart %d: limit %d", i, rpu)
		}
	}
	slices.Sort(took)
	t.Logf("time to recover (server listening again to its snapshot applied; backoff %v to %v): median %v, max %v",
		fastBackoff.Initial, fastBackoff.Max, took[len(took)/2], took[len(took)-1])
}

// TestMTLSRefused checks that a client without a certificate, or that
// does not trust the server's, gets no configuration.
func TestMTLSRefused(t *testing.T) {
	t.Parallel()
	pki, other := xdstest.NewPKI(t), xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki.ServerTLS(t))
	srv.Set(node, "1", domain("basic", "key1", 3))
	for _, tc := range []struct{ name, cert, key, ca string }{
		{"no client certificate", "", "", pki.CA},
		{"client certificate of another CA", other.ClientCert, other.ClientKey, pki.CA},
		{"server not trusted", pki.ClientCert, pki.ClientKey, other.CA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsFn, err := xds.TLSFiles(tc.cert, tc.key, tc.ca, xdstest.ServerName, nil)
			if err != nil {
				t.Fatal(err)
			}
			var applied atomic.Bool
			c, err := xds.New(xds.Options{Server: srv.Addr, NodeID: node, TLS: tlsFn, Backoff: fastBackoff,
				Apply: func(*config.Config) error { applied.Store(true); return nil }, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			c.Run(ctx)
			if applied.Load() {
				t.Error("a configuration was applied")
			}
		})
	}
}

// TestTLSFilesErrors checks that TLS files that cannot be used fail at
// start, naming the file.
func TestTLSFilesErrors(t *testing.T) {
	pki := xdstest.NewPKI(t)
	for _, tc := range []struct{ cert, key, ca, want string }{
		{pki.ClientCert, "", "", "give the client certificate and its key, or neither"},
		{pki.ClientCert, pki.CA, "", pki.ClientCert},
		{"", "", "/nonexistent/ca.crt", "/nonexistent/ca.crt"},
		{"", "", pki.ClientKey, "no PEM certificate in it"},
	} {
		_, err := xds.TLSFiles(tc.cert, tc.key, tc.ca, "", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TLSFiles(%q, %q, %q): %v, want %q", tc.cert, tc.key, tc.ca, err, tc.want)
		}
	}
}

// TestBackoff checks envoy's meaning of the backoff settings.
func TestBackoff(t *testing.T) {
	envoy := xds.DefaultBackoff()
	for n := range 10 {
		if d := envoy.Duration(n); d != 10*time.Second {
			t.Errorf("envoy's default, attempt %d: %v, want 10s (its factor 0.5 never grows)", n, d)
		}
	}
	b := xds.Backoff{Initial: time.Second, Max: 10 * time.Second, Factor: 2}
	var got []time.Duration
	for n := range 6 {
		got = append(got, b.Duration(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("factor 2: %v, want %v", got, want)
	}
	b.Jitter = true
	for range 100 {
		if d := b.Duration(2); d < time.Second || d > 4*time.Second {
			t.Fatalf("jittered attempt 2: %v, want within [1s, 4s]", d)
		}
	}
	if _, err := xds.New(xds.Options{Server: "x", NodeID: "n", Apply: func(*config.Config) error { return nil },
		Backoff: xds.Backoff{Initial: -1}}); err == nil {
		t.Error("a negative backoff accepted")
	}
}

// TestParse checks the readings of envoy's node metadata and headers.
func TestParse(t *testing.T) {
	md, ignored := xds.ParseNodeMetadata("a=1,b=x=y,broken,c=,=d")
	if len(md) != 4 || md["a"] != "1" || md["b"] != "x=y" || md["c"] != "" || md[""] != "d" {
		t.Errorf("metadata %v", md)
	}
	if !slices.Equal(ignored, []string{"broken"}) {
		t.Errorf("ignored %v", ignored)
	}
	if md, ignored := xds.ParseNodeMetadata(""); len(md) != 0 || len(ignored) != 0 {
		t.Errorf("empty: %v %v", md, ignored)
	}
	h, err := xds.ParseHeaders("x-a:1,x-b:2:3")
	if err != nil || len(h) != 2 || h["x-a"] != "1" || h["x-b"] != "2:3" {
		t.Errorf("headers %v %v", h, err)
	}
	if _, err := xds.ParseHeaders("x-a"); err == nil {
		t.Error("a header without a value accepted")
	}
}

// TestTLSFilesReread checks that a client certificate rotated in place
// is the one the next handshake presents.
func TestTLSFilesReread(t *testing.T) {
	a, b := xdstest.NewPKI(t), xdstest.NewPKI(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(p *xdstest.PKI) {
		for src, dst := range map[string]string{p.ClientCert: cert, p.ClientKey: key} {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(a)
	tlsFn, err := xds.TLSFiles(cert, key, a.CA, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	first := clientLeaf(t, tlsFn)
	install(b)
	deadline := time.Now().Add(certs.CheckInterval + 3*time.Second)
	for bytes.Equal(first, clientLeaf(t, tlsFn)) {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate is not read")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// records counts the log records at each level, and keeps the messages.
type records struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = map[slog.Level][]string{}
	}
	r.msgs[rec.Level] = append(r.msgs[rec.Level], rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) at(l slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[l])
}

// countNACKs counts the NACKs the server received.
func countNACKs(srv *xdstest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if xdstest.IsNACK(r) {
			n++
		}
	}
	return n
}

// TestNACKBounded checks that a push of tens of thousands of errors is
// NACKed with a message that names the first and counts the rest, far
// below a management server's 4 MiB, and is logged in one line.
func TestNACKBounded(t *testing.T) {
	logs := &records{}
	h := start(t, xds.Options{Logger: slog.New(logs)})
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	h.waitVersion(t, "1")
	const n = 30_000
	bad := &rlsconfv3.RateLimitConfig{Name: "big", Domain: "big"}
	for i := range n {
		bad.Descriptors = append(bad.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "k" + strconv.Itoa(i),
			RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}) // no unit: an error each
	}
	// An error that quotes a key far longer than a line.
	long := strings.Repeat("k", 100_000)
	bad.Descriptors[1].Key, bad.Descriptors[2].Key = long, long
	h.srv.Set(node, "2", bad)
	nack := h.srv.WaitRequest(wait, xdstest.IsNACK)
	if nack == nil {
		t.Fatal("no NACK")
	}
	msg := nack.GetErrorDetail().GetMessage()
	if len(msg) > 16<<10 {
		t.Errorf("NACK message of %d bytes, want at most 16 KiB", len(msg))
	}
	lines := strings.Split(msg, "\n")
	if first := `RateLimitConfig "big": descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`; !strings.HasPrefix(lines[0], first) {
		t.Errorf("NACK's first line %.200q, want %q", lines[0], first)
	}
	if len(lines) != 21 || !strings.HasSuffix(msg, "... and 29981 more errors") {
		t.Errorf("NACK of %d lines, ending %q; want 20 errors and a count of the other 29,981", len(lines), msg[max(0, len(msg)-100):])
	}
	for i, l := range lines[:min(len(lines), 20)] {
		if len(l) > 1000 {
			t.Errorf("NACK line %d: %d bytes, want it cut", i, len(l))
		}
	}
	if !strings.Contains(msg, "duplicate descriptor composite key 'big.kkkk") {
		t.Errorf("NACK without the duplicate key's error:\n%.2000s", msg)
	}
	if refused := logs.at(slog.LevelError); len(refused) != 1 {
		t.Errorf("%d error lines logged, want 1", len(refused))
	}
	if _, rpu := h.decide(t, "basic", "key1"); rpu != 3 {
		t.Errorf("after the NACK: limit %d, want version 1's 3", rpu)
	}
	if n := h.rejected.Load(); n != 1 {
		t.Errorf("rejected reported %d times, want 1", n)
	}
}

// TestRepeatedPushAnyOrder checks that an invalid push of several
// resources, which go-control-plane's cache sends again in an order of
// its own each time, is counted once and NACKed again about once a
// second, not at once.
func TestRepeatedPushAnyOrder(t *testing.T) {
	t.Parallel()
	h := start(t, xds.Options{})
	var confs []*rlsconfv3.RateLimitConfig
	for i := range 6 {
		c := domain("d"+strconv.Itoa(i), "key", 1)
		c.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
		confs = append(confs, c)
	}
	h.srv.Set(node, "1", confs...)
	if h.srv.WaitRequest(wait, xdstest.IsNACK) == nil {
		t.Fatal("no NACK")
	}
	time.Sleep(3500 * time.Millisecond)
	if nacks := countNACKs(h.srv); nacks < 3 || nacks > 6 {
		t.Errorf("%d NACKs in 3.5 s, want the repeated push refused about once a second", nacks)
	}
	if n := h.rejected.Load(); n != 1 {
		t.Errorf("rejected reported %d times, want 1", n)
	}
	orders := map[string]bool{}
	for _, o := range h.srv.Orders() {
		orders[strings.Join(o, ",")] = true
	}
	if len(orders) < 2 {
		t.Fatalf("the server sent the resources in one order only (%v): the test proves nothing", orders)
	}
	t.Logf("%d pushes in %d orders", len(h.srv.Orders()), len(orders))
}

// TestFrozenStream checks that a stream whose connection stops moving
// data, while it stays open, is noticed and opened again, so that a push
// waiting on the server is applied; and that a stream idle because
// nothing changed is kept.
func TestFrozenStream(t *testing.T) {
	t.Parallel()
	const stall = time.Second
	h := startVia(t, xds.Options{StallTimeout: stall}, true)
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	h.waitVersion(t, "1")

	// Idle for several stall timeouts: the probes' answers keep the
	// stream.
	time.Sleep(4 * stall)
	if n := h.proxy.Conns(); n != 1 {
		t.Fatalf("%d connections after %v idle, want the first kept", n, 4*stall)
	}

	h.proxy.Freeze()
	h.srv.Set(node, "2", domain("basic", "key1", 5))
	// The bound: the stall timeout and a tenth of it, the backoff, and
	// time to spare.
	const bound = 3 * stall
	start := time.Now()
	for h.client.Version() != "2" {
		if time.Since(start) > bound {
			t.Fatalf("version 2 not applied within %v of the stream freezing (at %q; %d connections)", bound, h.client.Version(), h.proxy.Conns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("a frozen stream opened again and its push applied after %v (stall timeout %v)", time.Since(start).Round(time.Millisecond), stall)
	if n := h.proxy.Conns(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if _, rpu := h.decide(t, "basic", "key1"); rpu != 5 {
		t.Errorf("limit %d, want version 2's 5", rpu)
	}
}

// TestKeepaliveFrozen checks that gRPC keepalive alone, the stall check
// off, notices a frozen stream: its ping goes unanswered. grpc-go pings
// no more often than every 10 s, so this test takes that long.
func TestKeepaliveFrozen(t *testing.T) {
	t.Parallel()
	const keepalive, timeout = 10 * time.Second, time.Second
	h := startVia(t, xds.Options{StallTimeout: -1, KeepaliveTime: keepalive, KeepaliveTimeout: timeout}, true)
	h.srv.Set(node, "1", domain("basic", "key1", 3))
	h.waitVersion(t, "1")
	h.proxy.Freeze()
	h.srv.Set(node, "2", domain("basic", "key1", 5))
	const bound = keepalive + timeout + 3*time.Second
	start := time.Now()
	for h.client.Version() != "2" {
		if time.Since(start) > bound {
			t.Fatalf("version 2 not applied within %v of the stream freezing (at %q; %d connections)", bound, h.client.Version(), h.proxy.Conns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("keepalive noticed a frozen stream, and its push was applied, after %v", time.Since(start).Round(time.Millisecond))
}

// TestQuotaBucketsPushed: quota buckets pushed below a
// config.QuotaBucketsKey descriptor are those the quota service assigns.
func TestQuotaBucketsPushed(t *testing.T) {
	t.Parallel()
	h := start(t, xds.Options{})
	h.srv.Set(node, "1", &rlsconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: config.QuotaBucketsKey, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "name", Value: "global", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 800}},
		}},
	}})
	h.waitVersion(t, "1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	server.RegisterQuota(g, server.NewQuota(h.svc, &quota.Memory{}, server.QuotaOptions{}))
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "api", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "global"}}, TimeElapsed: durationpb.New(0)}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if want := uint32(quota.StartShare(800)); tb.GetTokensPerFill().GetValue() != want {
		t.Fatalf("%v: want the start share of the pushed 800/s, %d", resp, want)
	}
}
