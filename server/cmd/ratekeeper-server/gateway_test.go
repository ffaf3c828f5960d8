package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/server/internal/certs/certstest"
	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
	"github.com/ratekeeper/ratekeeper/server/internal/xdstest"
)

// gateway is the files and ports of a ratelimit container as Envoy
// Gateway makes it, moved to a temporary directory and loopback.
type gateway struct {
	root     string // /data: RUNTIME_ROOT
	certs    *certstest.Secret
	ca       *certstest.CA
	grpc     string          // :8081
	http     string          // :8080, the probes
	metrics  string          // :19001
	debug    string          // envoy's :6070, which Envoy Gateway leaves as is
	xds      *xdstest.Server // envoy-gateway:18001, with mTLS
	redisURL string
}

// newGateway lays out the container's files and ports, and starts the
// xDS server of Envoy Gateway, with no snapshot yet. Like Envoy Gateway's
// own, it needs Redis: outside `make test` it skips t.
func newGateway(t *testing.T) *gateway {
	t.Helper()
	redisURL := redistest.Addr(t)
	dir := t.TempDir()
	g := &gateway{root: filepath.Join(dir, "data"), ca: certstest.NewCA(t, "envoy-gateway"), redisURL: redisURL}
	// Envoy Gateway's envoy-rate-limit Secret: one certificate for the
	// service and its xDS client, and the CA.
	g.certs = certstest.NewSecret(t, filepath.Join(dir, "certs"), g.ca.Issue(t, "envoy-ratelimit", "127.0.0.1"), g.ca)
	// Envoy Gateway's xDS server has a certificate of the same CA, and
	// asks for a client certificate from it.
	g.xds = xdstest.Start(t, &tls.Config{
		Certificates: []tls.Certificate{g.ca.Issue(t, "envoy-gateway", "127.0.0.1").TLS(t)},
		ClientCAs:    g.ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	if err := os.MkdirAll(filepath.Join(dir, "etc", "statsd-exporter"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "etc", "statsd-exporter", "conf.yaml"), "mappings: []\n")
	addrs := make([]string, 4)
	for i := range addrs {
		addrs[i] = freeAddr(t)
	}
	g.grpc, g.http, g.metrics, g.debug = addrs[0], addrs[1], addrs[2], addrs[3]
	return g
}

// env is the environment Envoy Gateway gives the container
// (internal/infrastructure/kubernetes/ratelimit/resource.go), with Redis
// and Prometheus enabled and tracing at its default (off). The listeners,
// which Envoy Gateway leaves at their defaults, are moved to loopback
// ports.
func (g *gateway) env() map[string]string {
	host := func(addr string) (string, string) { h, p, _ := net.SplitHostPort(addr); return h, p }
	h, p := host(g.http)
	gh, gp := host(g.grpc)
	dh, dp := host(g.debug)
	env := map[string]string{
		"RUNTIME_ROOT":                       g.root,
		"RUNTIME_SUBDIRECTORY":               "ratelimit",
		"RUNTIME_IGNOREDOTFILES":             "true",
		"RUNTIME_WATCH_ROOT":                 "false",
		"LOG_LEVEL":                          "info",
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         g.xds.Addr,
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               g.certs.Cert(),
		"GRPC_SERVER_TLS_KEY":                g.certs.Key(),
		"GRPC_SERVER_TLS_CA_CERT":            g.certs.CA(),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    g.certs.Cert(),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     g.certs.Key(),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  g.certs.CA(),
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    g.metrics,
		"PROMETHEUS_MAPPER_YAML":             filepath.Join(filepath.Dir(g.root), "etc", "statsd-exporter", "conf.yaml"),
		"HOST":                               h,
		"PORT":                               p,
		"GRPC_HOST":                          gh,
		"GRPC_PORT":                          gp,
		"DEBUG_HOST":                         dh,
		"DEBUG_PORT":                         dp,
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          g.redisURL,
	}
	return env
}

// startBinary runs bin with no arguments and exactly env, until the test
// ends (SIGTERM, then it must exit 0 within 10 s), and waits for
// /healthcheck on g.http to answer 200.
func startBinary(t *testing.T, bin string, env map[string]string, g *gateway) *syncBuffer {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("%s after SIGTERM: %v; output:\n%s", filepath.Base(bin), err, out.String())
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Errorf("%s: still running 10 s after SIGTERM", filepath.Base(bin))
			}
		})
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + g.http + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return out
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited: %v; output:\n%s", filepath.Base(bin), err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthcheck not 200 within 20 s; output:\n%s", filepath.Base(bin), out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvoyGatewayEnvironment starts the service's binary, built by the
// Dockerfile's command, with no arguments and exactly the environment
// Envoy Gateway gives its ratelimit container, and checks that it starts
// before any configuration, serves the configuration pushed by the xDS
// server over mTLS, applies a new snapshot while it runs, answers gRPC
// over TLS only, /healthcheck on PORT and Prometheus on PROMETHEUS_ADDR.
// envoyproxy/ratelimit, the service it replaces, passes the same checks:
// it is the control.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	for _, svc := range []string{"ratekeeper-server", "envoyproxy/ratelimit"} {
		t.Run(strings.ReplaceAll(svc, "/", "_"), func(t *testing.T) {
			g := newGateway(t)
			bin := imageBinary(t)
			if svc == "envoyproxy/ratelimit" {
				bin = envoytest.Binary(t)
			}
			log := startBinary(t, bin, g.env(), g)
			checkGateway(t, g, log)
		})
	}
}

// checkGateway checks a service started as Envoy Gateway starts it: the
// snapshots pushed to node envoy-ratelimit, and its listeners.
func checkGateway(t *testing.T, g *gateway, log *syncBuffer) {
	t.Helper()
	plain := &instance{grpc: g.grpc, log: log}
	conn, err := dialPlain(g.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	plain.conn = conn
	if _, err := plain.ask(t, "web", "user", "plain"); err == nil {
		t.Error("gRPC answered a plaintext client")
	}
	client := &tls.Config{RootCAs: g.ca.Pool(), ServerName: "127.0.0.1"}
	tconn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(credentials.NewTLS(client)))
	if err != nil {
		t.Fatal(err)
	}
	defer tconn.Close()
	s := &instance{grpc: g.grpc, log: log, conn: tconn}

	g.xds.Set("envoy-ratelimit", "1", pushed(2))
	waitLimit(t, s, 2)
	user := "u" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp, err := s.ask(t, "web", "user", user); err != nil || resp.GetOverallCode() != want {
			t.Fatalf("request %d of the first snapshot: %v %v, want %v", i+1, resp, err, want)
		}
	}
	g.xds.Set("envoy-ratelimit", "2", pushed(5))
	waitLimit(t, s, 5)
	if g.xds.WaitRequest(10*time.Second, xdstest.IsACK("2")) == nil {
		t.Error("the second snapshot was not ACKed")
	}
	if _, err := plain.ask(t, "web", "user", "plain"); err == nil {
		t.Error("gRPC answered a plaintext client once configured")
	}

	resp, err := http.Get("http://" + g.http + "/healthcheck")
	if err != nil {
		t.Fatalf("/healthcheck on PORT: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthcheck on PORT: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + g.metrics + "/metrics")
	if err != nil {
		t.Fatalf("Prometheus at PROMETHEUS_ADDR: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("# TYPE ")) {
		t.Errorf("Prometheus at PROMETHEUS_ADDR: %d %.300s", resp.StatusCode, body)
	}
}

// dialPlain is a plaintext gRPC client of addr.
func dialPlain(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}
