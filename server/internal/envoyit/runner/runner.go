// Package runner starts ratekeeper-server where envoyproxy/ratelimit's
// integration tests start envoy's runner in process: as a subprocess with
// no arguments and the environment that the test's settings.Settings
// stand for, so the tests' assertions run unchanged against it.
//
// What it changes on the way, each only an address: fixed ports the tests
// name are mapped to the free loopback ports that serve them (see package
// fixture), and 0.0.0.0 listeners become 127.0.0.1. A case does not start
// in the last seconds of a minute, which its per-minute counts would not
// survive. Cases that rest on
// what ratekeeper-server deliberately lacks (envoy's local cache, statsd
// tags) skip with the reason.
package runner

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/fixture"
	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/settings"
	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
)

// EnvServer names an environment variable that may hold the path of a
// binary to start instead of ratekeeper-server built from this module.
const EnvServer = "RATEKEEPER_ENVOYIT_SERVER"

// startTimeout is how long the server may take to listen on its gRPC
// port: envoy's tests wait 10 s for theirs.
const startTimeout = 10 * time.Second

// Runner is a ratekeeper-server started for one test.
type Runner struct {
	t     testing.TB
	cmd   *exec.Cmd
	log   *syncBuffer
	done  chan struct{}
	stats *Store
	once  sync.Once
}

// Start runs ratekeeper-server with the environment s stands for, and
// waits until it listens on s.GrpcPort. A server that exits or does not
// listen in time fails t, with its log: envoy's runner panics then, which
// fails the test.
func Start(t *testing.T, s settings.Settings) *Runner {
	t.Helper()
	if s.LocalCacheSizeInBytes > 0 {
		t.Skip(fixture.ExemptLocalCache)
	}
	if len(s.ExtraTags) > 0 {
		t.Skip(fixture.ExemptStatsd)
	}
	fixture.Need(t)
	for _, addrs := range servedBy(s) {
		if err := fixture.Ensure(addrs); err != nil {
			t.Fatal(err)
		}
	}
	bin := os.Getenv(EnvServer)
	if bin == "" {
		bin = envoytest.ServerBinary(t)
	}
	awayFromMinuteEnd()
	r := &Runner{t: t, log: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin)
	r.cmd.Dir, _ = os.Getwd() // RUNTIME_ROOT is relative to the test's directory
	r.cmd.Env = append(Environ(s), "SSL_CERT_FILE="+fixture.CertFile)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting ratekeeper-server: %v", err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	r.stats = &Store{url: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) + "/metrics", t: t}
	if s.UsePrometheus {
		r.stats.url = "http://" + listenAddr(s.PrometheusAddr) + s.PrometheusPath
	}
	t.Cleanup(r.Stop)

	deadline := time.Now().Add(startTimeout)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.GrpcPort))
	for {
		select {
		case <-r.done:
			t.Fatalf("ratekeeper-server exited at start (%v)", r.cmd.ProcessState)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("ratekeeper-server not listening on %s after %v", addr, startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// servedBy lists the Redis addresses the service of s connects to. The
// per-second Redis is not started: ratekeeper-server keeps every unit in
// the one Redis and ignores REDIS_PERSECOND_*; were it to contact it, the
// case would fail.
func servedBy(s settings.Settings) []string {
	if s.BackendType != "redis" {
		return nil
	}
	return []string{s.RedisUrl}
}

// minuteMargin is the time a case may take (with -race, on a busy
// machine): envoy's cases count down a per-minute limit and expect it not
// to reset meanwhile, so a case does not start later in a minute.
const minuteMargin = 10 * time.Second

// awayFromMinuteEnd waits, when less than minuteMargin is left of the
// current minute, until the next one begins.
func awayFromMinuteEnd() {
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute)
	if next.Sub(now) < minuteMargin {
		time.Sleep(next.Sub(now) + 50*time.Millisecond)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s) and, when the
// test failed, logs what the server wrote.
func (r *Runner) Stop() {
	r.once.Do(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			r.cmd.Process.Kill()
			<-r.done
			r.t.Errorf("ratekeeper-server did not stop within 5 s of SIGTERM")
		}
		r.stats.report()
		if r.t.Failed() {
			r.t.Logf("ratekeeper-server's log:\n%s", r.log.String())
		}
	})
}

// GetStatsStore returns envoy's stats as ratekeeper-server's metrics
// answer them.
func (r *Runner) GetStatsStore() *Store { return r.stats }

// Environ returns the environment that s stands for: every variable of
// envoy's settings, as envconfig reads it, with the addresses rewritten.
func Environ(s settings.Settings) []string {
	var env []string
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("envconfig")
		if name == "" {
			continue // set from the other fields: TLS configurations, interceptors
		}
		val := format(v.Field(i))
		switch name {
		case "HOST", "GRPC_HOST", "DEBUG_HOST":
			if val == "0.0.0.0" || val == "" {
				val = "127.0.0.1"
			}
		case "REDIS_URL", "REDIS_PERSECOND_URL", "CONFIG_GRPC_XDS_SERVER_URL":
			val = fixture.Rewrite(val)
		case "PROMETHEUS_ADDR":
			val = listenAddr(val)
		}
		env = append(env, name+"="+val)
	}
	return env
}

// listenAddr puts an address without a host (":9090") on loopback.
func listenAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// format writes a value as envconfig parses it.
func format(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return x.String()
	case []string:
		return strings.Join(x, ",")
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, len(keys))
		for i, k := range keys {
			pairs[i] = k + ":" + x[k]
		}
		return strings.Join(pairs, ",")
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// syncBuffer is the server's log, written by the process while a test
// may read it.
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

// ctx is the context of the stats' scrapes.
func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}
