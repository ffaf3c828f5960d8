package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

const oneConfig = `domain: web
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, oneConfig)
	writeFile(t, bad, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: -1}\n")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-check", "-config", good}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("valid config: exit %d, %s", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"-check", "-config", bad}, noEnv, &out, &errOut); code != 1 {
		t.Fatalf("invalid config: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "bad.yaml:4") || !strings.Contains(lines[1], "bad.yaml:6") {
		t.Fatalf("want both errors, each with its file and line; got:\n%s", errOut.String())
	}
	// No -config and no environment: envoy's default directory, absent here.
	errOut.Reset()
	if code := run(context.Background(), []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, noEnv, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "/srv/runtime_data/current/config") {
		t.Fatalf("no -config: exit %d, want 1 naming envoy's default directory; log:\n%s", code, errOut.String())
	}
}

func TestRedisURLs(t *testing.T) {
	for _, tc := range []struct {
		url  string
		kind string // the client's type, or "" for an error
	}{
		{"redis://127.0.0.1:6379/0", "*redis.Client"},
		{"rediss://user:pw@127.0.0.1:6380", "*redis.Client"},
		{"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", "*redis.ClusterClient"},
		{"redis+sentinel://127.0.0.1:26379?master_name=mymaster", "*redis.Client"},
		{"redis+sentinel://127.0.0.1:26379", ""},
		{"http://127.0.0.1:6379", ""},
		{"redis+ring://127.0.0.1:6379", ""},
		{"127.0.0.1:6379", "*redis.Client"},
		{"localhost", ""},
	} {
		c, err := redisClient(redisSettings{url: tc.url}, nil)
		if tc.kind == "" {
			if err == nil {
				t.Errorf("%s: want an error", tc.url)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if got := fmt.Sprintf("%T", c); got != tc.kind {
			t.Errorf("%s: %s, want %s", tc.url, got, tc.kind)
		}
		c.Close()
	}
	_, err := redisClient(redisSettings{url: "redis://user:secret@127.0.0.1:6379/notadb"}, nil)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("want an error without the password, got %v", err)
	}
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a log buffer that the server writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// instance is a ratekeeper-server running in the test.
type instance struct {
	grpc, http string
	log        *syncBuffer
	conn       *grpc.ClientConn
}

// start runs the command with args until the test ends, and waits for
// its /healthcheck.
func start(t *testing.T, args ...string) *instance {
	t.Helper()
	return startEnv(t, noEnv, args...)
}

// startEnv is start with an environment.
func startEnv(t *testing.T, env func(string) (string, bool), args ...string) *instance {
	t.Helper()
	s := &instance{grpc: freeAddr(t), http: freeAddr(t)}
	return s.run(t, env, append([]string{"-grpc-addr", s.grpc, "-http-addr", s.http}, args...))
}

// run runs the command with args and env, serving on s's addresses, until
// the test ends, and waits for its /healthcheck.
func (s *instance) run(t *testing.T, env func(string) (string, bool), args []string) *instance {
	t.Helper()
	s.log = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, env, io.Discard, s.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit %d; log:\n%s", code, s.log.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop within 10 s")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + s.http + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case code := <-done:
			t.Fatalf("exited with %d; log:\n%s", code, s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10 s; log:\n%s", s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.conn = conn
	return s
}

func (s *instance) ask(t *testing.T, domain string, kv ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(s.conn).ShouldRateLimit(ctx,
		&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

func (s *instance) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (s *instance) post(t *testing.T, path, body string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Post("http://"+s.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestServeInProcess(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, cfg, oneConfig)
	s := start(t, "-config", cfg)
	if !strings.Contains(s.log.String(), "limits are kept in process") {
		t.Errorf("the log does not say the limits are per instance:\n%s", s.log.String())
	}
	if code, body := s.get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	if code, _ := s.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz: %d", code)
	}

	// gRPC: the first is allowed, the second over the limit.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.ask(t, "web", "user", "grpc")
		if err != nil || resp.OverallCode != want {
			t.Fatalf("gRPC call %d: %v, %v", i, resp, err)
		}
	}
	// POST /json: 200, then 429; 400 for a malformed body.
	req := `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`
	if code, body, _ := s.post(t, "/json", req); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Fatalf("/json: %d %s", code, body)
	}
	if code, body, _ := s.post(t, "/json", req); code != 429 || !strings.Contains(body, `"OVER_LIMIT"`) {
		t.Fatalf("/json over the limit: %d %s", code, body)
	}
	if code, _, _ := s.post(t, "/json", `{"domain": `); code != 400 {
		t.Fatalf("/json malformed: %d", code)
	}
	// POST /v1/decide: the native API.
	native := `{"domain":"web","descriptors":[{"entries":[{"key":"user","value":"native"}]}]}`
	code, body, _ := s.post(t, "/v1/decide", native)
	var out struct {
		Allowed  bool
		Statuses []struct {
			Allowed      bool
			Rule         string
			Limit        int
			Period       string
			Remaining    float64
			ResetAfterMs int64 `json:"reset_after_ms"`
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 || !out.Allowed || len(out.Statuses) != 1 ||
		out.Statuses[0].Limit != 1 || out.Statuses[0].Period != "1h0m0s" || out.Statuses[0].ResetAfterMs <= 0 {
		t.Fatalf("/v1/decide: %d %s (%v)", code, body, err)
	}
	code, body, h := s.post(t, "/v1/decide", native)
	if code != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, `"retry_after_ms"`) {
		t.Fatalf("/v1/decide over the limit: %d %s %v", code, body, h)
	}
	if code, _, _ := s.post(t, "/v1/decide", `{"domain":"web","descriptors":[],"extra":1}`); code != 400 {
		t.Fatalf("/v1/decide with an unknown field: %d", code)
	}
	// Metrics, labelled by rule, never by value.
	_, metrics := s.get(t, "/metrics")
	for _, want := range []string{
		`ratekeeper_server_decisions_total{domain="web",outcome="ok",rule="user"}`,
		`ratekeeper_server_config_generation 1`,
		`ratekeeper_server_rlqs_streams 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, `"grpc"`) || strings.Contains(metrics, `"json"`) {
		t.Error("/metrics holds descriptor values")
	}
	// Health and reflection.
	hc, err := healthpb.NewHealthClient(s.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", hc, err)
	}
	if !reflects(t, s.conn, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatal("reflection does not list the rate limit service")
	}
}

// reflects reports whether server reflection lists service.
func reflects(t *testing.T, conn *grpc.ClientConn, service string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.Name == service {
			return true
		}
	}
	return false
}

func TestRedisDownAtStart(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	cfg := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, cfg, oneConfig)
	addr := freeAddr(t)
	s := start(t, "-config", cfg, "-redis", "redis://"+addr)
	if code, _ := s.get(t, "/readyz"); code != 503 {
		t.Fatalf("/readyz with Redis down: %d", code)
	}
	_, err = s.ask(t, "web", "user", "a")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("with Redis down, want UNAVAILABLE, got %v", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := s.get(t, "/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d 10 s after Redis started; log:\n%s", code, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Once ready, every caller succeeds, those that start together
	// first included: the probe's success ended the fail-fast state.
	const callers = 32
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			var resp *rlsv3.RateLimitResponse
			resp, errs[i] = s.ask(t, "web", "user", "a")
			if errs[i] == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK && i == 0 {
				errs[i] = fmt.Errorf("answered %v", resp.OverallCode)
			}
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if status.Code(err) == codes.Unavailable {
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d callers got UNAVAILABLE once /readyz said ready; log:\n%s", failed, callers, s.log.String())
	}
	if n, err := c.DBSize(context.Background()).Result(); err != nil || n != 1 {
		t.Fatalf("Redis holds %d keys (%v), want the one the call wrote", n, err)
	}
}

func TestHotReload(t *testing.T) {
	// A Kubernetes ConfigMap: dir/web.yaml -> ..data/web.yaml, with ..data
	// a symlink swapped to a new timestamped directory on every change.
	dir := t.TempDir()
	version := func(n int, text string) {
		t.Helper()
		ts := filepath.Join(dir, fmt.Sprintf("..v%d", n))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(ts, "web.yaml"), text)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version(1, oneConfig)
	if err := os.Symlink(filepath.Join("..data", "web.yaml"), filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	s := start(t, "-config", dir)
	limitOf := func() uint32 {
		resp, err := s.ask(t, "web", "user", "reload")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 10 s; log:\n%s", what, s.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := limitOf(); got != 1 {
		t.Fatalf("limit %d, want 1", got)
	}
	version(2, strings.Replace(oneConfig, "requests_per_unit: 1", "requests_per_unit: 7", 1))
	waitFor("the new limit applied", func() bool { return limitOf() == 7 })
	version(3, "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: lightyear, requests_per_unit: 3}\n")
	waitFor("the invalid config counted", func() bool {
		_, m := s.get(t, "/metrics")
		return strings.Contains(m, "ratekeeper_server_config_reload_errors_total 1")
	})
	if got := limitOf(); got != 7 {
		t.Fatalf("after an invalid config, limit %d, want the previous 7", got)
	}
	if !strings.Contains(s.log.String(), "web.yaml:4") {
		t.Errorf("the log does not name the invalid file and line:\n%s", s.log.String())
	}
	version(4, strings.Replace(oneConfig, "requests_per_unit: 1", "requests_per_unit: 9", 1))
	waitFor("the next valid config applied", func() bool { return limitOf() == 9 })
	_, m := s.get(t, "/metrics")
	if !strings.Contains(m, "ratekeeper_server_config_generation 3") {
		t.Errorf("want generation 3 after two good reloads")
	}
}

func TestRedisClientsHonourDeadlines(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:6379", "redis+cluster://127.0.0.1:7000", "redis+sentinel://127.0.0.1:26379?master_name=m"} {
		c, err := redisClient(redisSettings{url: u}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var on bool
		switch c := c.(type) {
		case *redis.Client:
			on = c.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			on = c.Options().ContextTimeoutEnabled
		}
		c.Close()
		if !on {
			t.Errorf("%s: ContextTimeoutEnabled is off", u)
		}
	}
}
