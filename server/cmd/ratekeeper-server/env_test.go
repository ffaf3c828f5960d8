package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper/server"
)

// TestSettingsPrecedence checks envoy's variables, their defaults, and
// flags winning over them.
func TestSettingsPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		got  func(*settings) any
		want any
	}{
		{"envoy's listeners", nil, nil, func(s *settings) any { return s.httpAddr + " " + s.grpcAddr }, "0.0.0.0:8080 0.0.0.0:8081"},
		{"HOST and PORT", map[string]string{"HOST": "127.0.0.1", "PORT": "9999"}, nil, func(s *settings) any { return s.httpAddr }, "127.0.0.1:9999"},
		{"-http-addr over PORT", map[string]string{"PORT": "9999"}, []string{"-http-addr", "127.0.0.1:1"}, func(s *settings) any { return s.httpAddr }, "127.0.0.1:1"},
		{"GRPC_UDS", map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, nil, func(s *settings) any { return s.grpcNetwork + " " + s.grpcAddr }, "unix /tmp/rl.sock"},
		{"envoy's config directory", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, nil, func(s *settings) any { return s.config }, "/data/ratelimit/config"},
		{"-config over RUNTIME_ROOT", map[string]string{"RUNTIME_ROOT": "/data"}, []string{"-config", "x.yaml"}, func(s *settings) any { return s.config }, "x.yaml"},
		{"no debug listener by default", nil, nil, func(s *settings) any { return s.debugAddr }, ""},
		{"DEBUG_PORT", map[string]string{"DEBUG_PORT": "6070"}, nil, func(s *settings) any { return s.debugAddr }, "0.0.0.0:6070"},
		{"metrics on the HTTP address", map[string]string{"PROMETHEUS_ADDR": ":19001"}, nil, func(s *settings) any { return s.metricsAddr }, ""},
		{"USE_PROMETHEUS", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"}, nil, func(s *settings) any { return s.metricsAddr + s.metricsPath }, ":19001/metrics"},
		{"key prefix", nil, nil, func(s *settings) any { return s.keyPrefix }, "rk:"},
		{"CACHE_KEY_PREFIX", map[string]string{"CACHE_KEY_PREFIX": ""}, nil, func(s *settings) any { return s.keyPrefix }, ""},
		{"-key-prefix over CACHE_KEY_PREFIX", map[string]string{"CACHE_KEY_PREFIX": "a"}, []string{"-key-prefix", "b"}, func(s *settings) any { return s.keyPrefix }, "b"},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, nil, func(s *settings) any { return s.shadow }, true},
		{"-shadow=false over SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, []string{"-shadow=false"}, func(s *settings) any { return s.shadow }, false},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"}, nil,
			func(s *settings) any {
				return s.limitHeaders && s.limitHeaderNames == [3]string{"RateLimit-Limit", "RateLimit-Remaining", "X-Reset"}
			}, true},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, nil, func(s *settings) any { return s.deniedHits() }, server.DeniedCountOver},
		{"log level", nil, nil, func(s *settings) any { return s.logLevel }, "info"},
		{"LOG_LEVEL", map[string]string{"LOG_LEVEL": "debug"}, nil, func(s *settings) any { return s.logLevel }, "debug"},
		{"-log-level over LOG_LEVEL", map[string]string{"LOG_LEVEL": "debug"}, []string{"-log-level", "error"}, func(s *settings) any { return s.logLevel }, "error"},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1m", "GRPC_MAX_CONNECTION_AGE_GRACE": "5s"}, nil,
			func(s *settings) any { return s.conns.grpcMaxAge + s.conns.grpcMaxAgeGrace }, time.Minute + 5*time.Second},
		{"CONFIG_TYPE", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"}, nil, func(s *settings) any { return s.configType }, "GRPC_XDS_SOTW"},
		{"-config over CONFIG_TYPE", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, []string{"-config", "x.yaml"}, func(s *settings) any { return s.configType }, "FILE"},
		{"CONFIG_GRPC_XDS_SERVER_URL", map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001"}, nil, func(s *settings) any { return s.xds.server }, "envoy-gateway:18001"},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, nil, func(s *settings) any { return s.forceStart }, true},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, nil, func(s *settings) any { return s.healthyWithAConfig }, true},
	} {
		s, err := parseSettings(tc.args, envOf(tc.env), io.Discard)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := tc.got(s); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	var log syncBuffer
	if code := run(t.Context(), nil, envOf(map[string]string{"PORT": "http"}), &log, &log); code != 2 || !strings.Contains(log.String(), `PORT="http"`) {
		t.Errorf("PORT=http: exit %d, %q", code, log.String())
	}
}

// TestEnvoyEnvironment starts the service from envoy's variables: the
// configuration of RUNTIME_ROOT, Prometheus on its own listener, JSON
// logs, and each unneeded variable logged once, never fatal.
func TestEnvoyEnvironment(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ratelimit", "config", "web.yaml"), oneConfig)
	prom := freeAddr(t)
	s := startEnv(t, envOf(map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": prom, "PROMETHEUS_PATH": "/stats/prometheus",
		"LOG_FORMAT": "json", "LOG_LEVEL": "info",
		"USE_STATSD": "false", "REDIS_PIPELINE_WINDOW": "150us", "LOCAL_CACHE_SIZE_IN_BYTES": "not a number",
	}))
	if resp, err := s.ask(t, "web", "user", "u"); err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Fatalf("RUNTIME_ROOT's configuration not served: %v %v", resp, err)
	}
	if err := askQuota(t, s.grpc); err != nil {
		t.Errorf("the quota service in envoy's environment: %v", err)
	}
	resp, err := http.Get("http://" + prom + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "ratekeeper_server_config_generation 1") {
		t.Errorf("PROMETHEUS_ADDR: %d %.200s", resp.StatusCode, body)
	}
	if code, _ := s.get(t, "/metrics"); code != 404 {
		t.Errorf("/metrics on the HTTP address with USE_PROMETHEUS: %d, want 404", code)
	}
	lines := strings.Split(strings.TrimSpace(s.log.String()), "\n")
	ignored := map[string]int{}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("LOG_FORMAT=json: not JSON: %q", l)
		}
		if v, ok := rec["variable"].(string); ok {
			ignored[v]++
		}
	}
	for _, v := range []string{"USE_STATSD", "REDIS_PIPELINE_WINDOW", "LOCAL_CACHE_SIZE_IN_BYTES"} {
		if ignored[v] != 1 {
			t.Errorf("%s logged %d times, want once", v, ignored[v])
		}
	}
}

// TestHealthyWithAConfig checks FORCE_START_WITHOUT_INITIAL_CONFIG and
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED with files: the service starts
// without a configuration, unhealthy, and is healthy once one loads.
func TestHealthyWithAConfig(t *testing.T) {
	dir := t.TempDir()
	s := startEnv(t, envOf(map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}), "-config", dir)
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck without a configuration: %d, want 500", code)
	}
	writeFile(t, filepath.Join(dir, "web.yaml"), oneConfig)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, body := s.get(t, "/healthcheck"); code == 200 && body == "OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy 10 s after a configuration was written; log:\n%s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Without FORCE_START_WITHOUT_INITIAL_CONFIG, no configuration stops it.
	var log syncBuffer
	if code := run(t.Context(), []string{"-config", t.TempDir(), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, noEnv, &log, &log); code != 1 {
		t.Errorf("no configuration, no forced start: exit %d, want 1", code)
	}
}

// TestConnectionBounds checks that a slow body, an idle keep-alive and an
// idle or old gRPC connection are closed.
func TestConnectionBounds(t *testing.T) {
	s := start(t, "-config", tlsConfigFile(t), "-http-read-timeout", "300ms", "-http-idle-timeout", "300ms",
		"-grpc-max-connection-idle", "300ms")
	closedWithin := func(what string, c net.Conn, d time.Duration) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(d))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%s: not closed within %v: %v", what, d, err)
		}
	}
	slow, err := net.Dial("tcp", s.http)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	closedWithin("a slow body", slow, 3*time.Second)

	idle, err := net.Dial("tcp", s.http)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive request: %v", err)
	}
	closedWithin("an idle keep-alive", idle, 3*time.Second)

	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := (&instance{conn: conn}).ask(t, "web", "user", "u"); err != nil {
		t.Fatal(err)
	}
	if !waitState(conn, connectivity.Idle, 3*time.Second) {
		t.Errorf("an idle gRPC connection: still %v after 3 s", conn.GetState())
	}
}

// waitState waits until conn is in state want.
func waitState(conn *grpc.ClientConn, want connectivity.State, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for st := conn.GetState(); st != want; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			return false
		}
	}
	return true
}

// TestGRPCMaxStreams holds one stream open on a connection capped at one,
// and checks that a call on it waits for a free stream.
func TestGRPCMaxStreams(t *testing.T) {
	s := start(t, "-config", tlsConfigFile(t), "-grpc-max-streams", "1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A first round trip: the stream holds the connection's one slot.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	call, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	_, err = rlsv3.NewRateLimitServiceClient(s.conn).ShouldRateLimit(call, &rlsv3.RateLimitRequest{
		Domain:      "web",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}},
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a second call on a connection of one stream: %v, want it to wait until its deadline", err)
	}
	cancel()
	if _, err := s.ask(t, "web", "user", "u"); err != nil {
		t.Errorf("once the stream ended: %v", err)
	}
}

// TestPrometheusPathAsGiven serves a PROMETHEUS_PATH that a ServeMux
// pattern could not be.
func TestPrometheusPathAsGiven(t *testing.T) {
	prom := freeAddr(t)
	startEnv(t, envOf(map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": prom, "PROMETHEUS_PATH": "/stats/{x"}), "-config", tlsConfigFile(t))
	resp, err := http.Get("http://" + prom + "/stats/%7Bx")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("PROMETHEUS_PATH=/stats/{x: %d", resp.StatusCode)
	}
}
