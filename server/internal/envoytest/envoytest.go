// Package envoytest runs envoyproxy/ratelimit and ratekeeper-server as
// real processes for tests that compare them: Binary builds envoy's
// service once per machine and version, StartEnvoy and StartRatekeeper run
// one of each on free loopback ports with a given configuration (or,
// StartEnvoyXDS and StartRatekeeperXDS, configured by an xDS management
// server), and RedisAddr names the throwaway Redis that `make test`
// starts.
//
// A test package that uses it calls Run from its TestMain, which removes
// the ratekeeper-server binary built for the run and says how many tests
// skipped:
//
//	func TestMain(m *testing.M) { os.Exit(envoytest.Run(m)) }
package envoytest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvoyModule and EnvoyVersion name the envoyproxy/ratelimit release the
// comparison runs against.
const (
	EnvoyModule  = "github.com/envoyproxy/ratelimit"
	EnvoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// EnvBinary names an environment variable that may hold the path of an
// envoyproxy/ratelimit service binary to use instead of building one.
const EnvBinary = "RATEKEEPER_ENVOY_RATELIMIT"

// EnvRedisAddr names the environment variable holding the test Redis
// address (host:port), as scripts/with-redis.sh sets it.
const EnvRedisAddr = "RATEKEEPER_REDIS_ADDR"

// Addrs are the loopback addresses a started service listens on.
type Addrs struct {
	GRPC string // host:port of the gRPC server
	HTTP string // host:port of the HTTP server
}

// URL returns the HTTP server's URL for path, which starts with a slash.
func (a Addrs) URL(path string) string { return "http://" + a.HTTP + path }

// startTimeout bounds how long a service may take to answer after start.
const startTimeout = 30 * time.Second

// skipped counts the tests that skipped for want of Redis, the envoy
// binary or the server's source, for Run to report.
var skipped atomic.Int64

// skip skips t, or fails it under CI=true, where a comparison that cannot
// run is a set-up error rather than a pass.
func skip(t testing.TB, reason string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(reason + " (CI is set, so a test that cannot run fails)")
	}
	skipped.Add(1)
	t.Skip(reason)
}

// RedisAddr returns the address of the test Redis, or skips t when none
// is set (failing it under CI=true). It fails t if Redis does not answer.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvRedisAddr)
	if addr == "" {
		skip(t, "no test Redis: run `make test`, which starts one, or set "+EnvRedisAddr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("test Redis at %s: %v", addr, err)
	}
	return addr
}

// Run runs the tests of m, removes the ratekeeper-server binary they
// built, and prints one line when some of them skipped.
func Run(m *testing.M) int {
	code := m.Run()
	if dir := serverDir.Load(); dir != nil {
		os.RemoveAll(*dir)
	}
	if n := skipped.Load(); n > 0 {
		fmt.Fprintf(noticeWriter(), "%s: %d tests comparing with envoyproxy/ratelimit skipped; go test -v says why\n",
			packagePath(), n)
	}
	return code
}

// packagePath returns the import path of the package under test.
func packagePath() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		return strings.TrimSuffix(bi.Path, ".test")
	}
	return os.Args[0]
}

// noticeWriter returns where a line reaches whoever runs the tests: go
// test shows a passing package's output only with -v, so the line goes to
// the go command's standard error when that is a terminal or a pipe.
func noticeWriter() *os.File {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return os.Stderr
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) == 0 {
		f.Close()
		return os.Stderr
	}
	return f
}

// givenPorts are the ports freePorts has returned in this process: a
// port is never given twice, so that services started by tests running
// in parallel never take each other's (one's HTTP port another's debug
// port, answering for it).
var givenPorts struct {
	sync.Mutex
	m map[int]bool
}

// freePorts returns n distinct loopback ports that were free a moment
// ago, and that it never returned before. Another process may take one
// before the service binds it: the callers retry a start that fails so.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	givenPorts.Lock()
	defer givenPorts.Unlock()
	if givenPorts.m == nil {
		givenPorts.m = map[int]bool{}
	}
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		ls = append(ls, l) // held until all are found: distinct
		port := l.Addr().(*net.TCPAddr).Port
		if !givenPorts.m[port] {
			givenPorts.m[port] = true
			ports = append(ports, port)
		}
	}
	return ports
}

// writeConfig writes each of files (name to content) into dir.
func writeConfig(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if name != filepath.Base(name) {
			t.Fatalf("config file name %q: want a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// output collects a process's standard output and error, keeping the
// last maxOutput bytes.
type output struct {
	mu  sync.Mutex
	buf []byte
}

const maxOutput = 1 << 20

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if len(o.buf) > maxOutput {
		o.buf = append(o.buf[:0], o.buf[len(o.buf)-maxOutput:]...)
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// process is a started service.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *output
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startProcess starts path with args and env (the whole environment).
func startProcess(name, path string, args, env []string) (*process, error) {
	p := &process{name: name, out: &output{}, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = env
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop ends p: SIGTERM, then SIGKILL if it has not exited within grace.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether p has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// errExited says a process exited before it answered.
var errExited = errors.New("exited before it answered")

// waitReady polls url until it answers 200 and grpcAddr accepts a
// connection, for at most startTimeout.
func (p *process) waitReady(url, grpcAddr string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s %w (%v)", p.name, errExited, p.err)
		}
		last = probe(client, url, grpcAddr)
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within %v: %v", p.name, startTimeout, last)
}

// probe checks that url answers 200 and that grpcAddr accepts a
// connection.
func probe(client *http.Client, url, grpcAddr string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	c, err := net.DialTimeout("tcp", grpcAddr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// portTaken reports whether a process's output says a port it was given
// was taken in the meantime.
func portTaken(p *process) bool {
	return strings.Contains(p.out.String(), "address already in use")
}

// startAttempts bounds the starts on fresh ports after a port was taken.
const startAttempts = 3

// launch starts a service with start (given fresh ports each attempt),
// waits until it answers, and stops it when t ends, logging its output if
// t failed.
func launch(t testing.TB, name string, nports int, start func(ports []int) (*process, Addrs, string, error)) Addrs {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, addrs, readyURL, err := start(freePorts(t, nports))
		if err != nil {
			t.Fatal(err)
		}
		err = p.waitReady(readyURL, addrs.GRPC)
		if err == nil {
			t.Cleanup(func() {
				p.stop(10 * time.Second)
				if t.Failed() {
					t.Logf("%s output:\n%s", name, p.out.String())
				}
			})
			return addrs
		}
		p.stop(time.Second)
		if errors.Is(err, errExited) && portTaken(p) && attempt < startAttempts {
			continue
		}
		t.Fatalf("%v; its output:\n%s", err, p.out.String())
	}
}
