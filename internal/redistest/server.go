package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server on a loopback port, for tests that
// pause, kill or restart Redis without disturbing the shared one.
type Server struct {
	Addr string
	t    testing.TB
	port int
	args []string // added to redis-server's command line
	cmd  *exec.Cmd
}

// StartServer starts a private, empty redis-server for t and stops it when
// t ends. Like Addr, it skips t outside `make test`.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return StartServerWith(t)
}

// StartServerWith is StartServer with more redis-server options, such as
// "--maxmemory", "1mb".
func StartServerWith(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, func() []string { return args })
}

// startServer starts a private redis-server with the options that args
// returns, asked again at each attempt on a new port.
func startServer(t testing.TB, args func() []string) *Server {
	t.Helper()
	Addr(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found: %v", err)
	}
	s := &Server{t: t}
	for attempt := 0; attempt < 5 && s.cmd == nil; attempt++ {
		s.port = freePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		s.args = args()
		if err := s.start(); err != nil {
			t.Logf("redis-server on port %d: %v; trying another port", s.port, err)
		}
	}
	if s.cmd == nil {
		t.Fatal("could not start a private redis-server")
	}
	t.Cleanup(s.Stop)
	return s
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs redis-server on s.port and waits until it answers.
func (s *Server) start() error {
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir()}, s.args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cmd = cmd
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("no answer within 5 s")
}

// Pause stops the server with SIGSTOP: it keeps its connections and
// accepts new ones (the kernel does), but answers nothing until Resume,
// like a host that hangs.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pause redis-server: %v", err)
	}
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("resume redis-server: %v", err)
	}
}

// Stop kills the server, as a crash would, paused or not. It is safe to
// call twice.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	for i := 0; i < 100; i++ { // until the port is free again
		if c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond); err == nil {
			c.Close()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		break
	}
	s.cmd = nil
}

// Restart starts an empty server on the same port after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Client returns a client of this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { c.Close() })
	return c
}
