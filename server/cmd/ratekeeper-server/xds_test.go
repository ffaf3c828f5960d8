package main

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/server/internal/xdstest"
)

// pushed is a RateLimitConfig of domain web whose key user allows rpu
// requests an hour.
func pushed(rpu uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: rpu}},
	}}
}

// xdsArgs are the flags of configuration over xDS with mTLS to srv.
func xdsArgs(srv *xdstest.Server, pki *xdstest.PKI, extra ...string) []string {
	return append([]string{
		"-xds-server", srv.Addr, "-xds-node-id", "envoy-ratelimit", "-xds-node-metadata", "zone=a",
		"-xds-client-cert", pki.ClientCert, "-xds-client-key", pki.ClientKey,
		"-xds-server-ca", pki.CA, "-xds-server-san", xdstest.ServerName,
		"-xds-backoff-initial", "50ms", "-xds-backoff-max", "200ms",
	}, extra...)
}

// limitOf asks for one descriptor and returns the limit it reports.
func limitOf(t *testing.T, s *instance, value string) uint32 {
	t.Helper()
	resp, err := s.ask(t, "web", "user", value)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// waitLimit waits until the service reports limit rpu.
func waitLimit(t *testing.T, s *instance, rpu uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := s.ask(t, "web", "user", "probe")
		if err == nil && resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == rpu {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit %d not applied within 10 s; log:\n%s", rpu, s.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeXDS checks the service configured over xDS with mTLS, started
// as Envoy Gateway starts it (forced start, healthy once configured): it
// serves before the first push, fails /healthcheck until one is applied,
// applies each update, and keeps the last one when a push is invalid,
// counting it.
func TestServeXDS(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki.ServerTLS(t))
	s := start(t, xdsArgs(srv, pki, "-force-start", "-healthy-with-config")...)
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck before the first push: %d, want 500", code)
	}
	if _, err := s.ask(t, "web", "user", "a"); err == nil {
		t.Error("a request answered before any configuration")
	}
	srv.Set("envoy-ratelimit", "1", pushed(2))
	waitLimit(t, s, 2)
	if code, body := s.get(t, "/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp, err := s.ask(t, "web", "user", "u"); err != nil || resp.GetOverallCode() != want {
			t.Fatalf("request %d: %v %v", i+1, resp, err)
		}
	}
	srv.Set("envoy-ratelimit", "2", pushed(5))
	waitLimit(t, s, 5)

	bad := pushed(9)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Set("envoy-ratelimit", "3", bad)
	if srv.WaitRequest(10*time.Second, xdstest.IsNACK) == nil {
		t.Fatal("the invalid push was not NACKed")
	}
	if got := limitOf(t, s, "after"); got != 5 {
		t.Errorf("after an invalid push: limit %d, want the previous 5", got)
	}
	_, metrics := s.get(t, "/metrics")
	if !strings.Contains(metrics, "ratekeeper_server_config_reload_errors_total 1\n") {
		t.Errorf("/metrics does not count the refused push once:\n%s", grepLines(metrics, "reload_errors"))
	}
	if md := srv.Requests()[0].GetNode().GetMetadata().GetFields(); md["zone"].GetStringValue() != "a" {
		t.Errorf("node metadata %v", md)
	}

	// Empty: no domain, so not healthy again.
	srv.Set("envoy-ratelimit", "4")
	if srv.WaitRequest(10*time.Second, xdstest.IsACK("4")) == nil {
		t.Fatal("the empty push was not ACKed")
	}
	if code, _ := s.get(t, "/healthcheck"); code != 500 {
		t.Errorf("/healthcheck with no domain: %d, want 500", code)
	}
}

// TestServeXDSWaitsForFirstPush checks that without -force-start the
// service serves only once the first push is applied, as envoy's does.
func TestServeXDSWaitsForFirstPush(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki.ServerTLS(t))
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Set("envoy-ratelimit", "1", pushed(3))
	}()
	s := start(t, xdsArgs(srv, pki)...)
	if got := limitOf(t, s, "a"); got != 3 {
		t.Errorf("limit %d, want 3", got)
	}
	if !strings.Contains(s.log.String(), "waiting for the first xDS push") {
		t.Errorf("the log does not say it waits:\n%s", s.log.String())
	}
}

// TestXDSFlagErrors checks the flags that cannot go together.
func TestXDSFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config", "x.yaml", "-xds-server", "h:1"}, "give -config or -xds-server, not both"},
		{[]string{"-check", "-xds-server", "h:1"}, "-check reads -config"},
		{[]string{"-xds-server", "h:1", "-xds-client-cert", "c.pem"}, "give the client certificate and its key, or neither"},
		{[]string{"-xds-server", "h:1", "-xds-headers", "nocolon"}, "want key:value"},
		{[]string{"-xds-server", "h:1", "-xds-keepalive-time", "-1s"}, "a keepalive interval is negative"},
	} {
		var log syncBuffer
		code := run(t.Context(), append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, tc.args...), noEnv, &log, &log)
		if code == 0 || !strings.Contains(log.String(), tc.want) {
			t.Errorf("%v: exit %d, output %q; want it to say %q", tc.args, code, log.String(), tc.want)
		}
	}
}

// grepLines returns the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeXDSEnvoyGatewayEnvironment checks the service started with the
// xDS part of the environment Envoy Gateway gives its ratelimit
// container (no SAN: the certificate is checked against the server's
// address): it serves the pushed configuration over mTLS and applies a
// new snapshot without a restart.
func TestServeXDSEnvoyGatewayEnvironment(t *testing.T) {
	pki := xdstest.NewPKI(t)
	srv := xdstest.Start(t, pki.ServerTLS(t))
	s := startEnv(t, envOf(map[string]string{
		"RUNTIME_ROOT": t.TempDir(), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
		"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE":                         "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":          srv.Addr,
		"CONFIG_GRPC_XDS_NODE_ID":             "envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":      "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":     pki.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":      pki.ClientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":   pki.CA,
		"FORCE_START_WITHOUT_INITIAL_CONFIG":  "true",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "50ms",
	}))
	srv.Set("envoy-ratelimit", "1", pushed(2))
	waitLimit(t, s, 2)
	srv.Set("envoy-ratelimit", "2", pushed(4))
	waitLimit(t, s, 4)
	if srv.WaitRequest(10*time.Second, xdstest.IsACK("2")) == nil {
		t.Error("version 2 not ACKed")
	}
}
