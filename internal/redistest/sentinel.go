package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name under which the Sentinel of StartSentinel
// monitors its master.
const SentinelMasterName = "ratekeeper"

// Sentinel is a private Redis Sentinel monitoring a private master, for
// tests of failover clients.
type Sentinel struct {
	// Addr is the Sentinel's address.
	Addr string
	// Master is the monitored server.
	Master *Server
}

// StartSentinel starts a private master and a Sentinel monitoring it under
// SentinelMasterName, and stops both when t ends. It skips t outside
// `make test`, and when neither redis-sentinel nor redis-server is
// installed.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	Addr(t)
	// redis-sentinel is redis-server under another name, which some
	// packages leave out.
	command := "redis-sentinel"
	if _, err := exec.LookPath(command); err != nil {
		command = "redis-server"
		if _, err := exec.LookPath(command); err != nil {
			Skip(t, "no Sentinel: neither redis-sentinel nor redis-server is installed")
		}
	}
	s := &Sentinel{Master: StartServer(t)}
	for attempt := 0; attempt < 5 && s.Addr == ""; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if err := s.start(t, command, port); err != nil {
			t.Logf("Sentinel on port %d: %v; trying another port", port, err)
		}
	}
	if s.Addr == "" {
		t.Fatal("could not start a Sentinel")
	}
	return s
}

// start runs a Sentinel on port, stopped when t ends, and waits until it
// names the master. Sentinel rewrites its configuration file, so the file
// is the test's own.
func (s *Sentinel) start(t testing.TB, command string, port int) error {
	host, masterPort, err := net.SplitHostPort(s.Master.Addr)
	if err != nil {
		return err
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	// A single Sentinel makes a quorum of 1; it never needs to fail over
	// in these tests, so a slow test run must not make it try.
	config := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %[3]s 60000\n",
		port, dir, SentinelMasterName, host, masterPort)
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(command, conf, "--sentinel")
	var out bytes.Buffer // its log, for the error
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v\n%s", err, out.Bytes())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		got, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		cancel()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == s.Master.Addr {
			s.Addr = addr
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-exited
	return fmt.Errorf("no answer within 5 s")
}

// FailoverClient returns a client that finds the master through the
// Sentinel, closed when the test ends.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    SentinelMasterName,
		SentinelAddrs: []string{s.Addr},
	})
	t.Cleanup(func() { c.Close() })
	return c
}
